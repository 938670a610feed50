// Command probe runs inside the end-to-end test's pods and asks the outside
// echo server (egret lab echo-server) which source address it saw:
//
//	probe http http://10.80.0.1:8080/   → prints "<ip>:<port>"
//	probe udp 10.80.0.1:8081            → prints "<ip>:<port>"
//	probe hold 10.80.0.1:8080           → one keep-alive HTTP connection, a
//	                                       request every 200 ms until stdin
//	                                       closes; prints "<ip>:<port> <n>"
//	                                       and fails if an answer came from
//	                                       another source or the connection broke
//
// busybox has wget but no UDP client, hence this. Built static by the test.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: probe http URL | probe udp HOST:PORT | probe hold HOST:PORT")
		os.Exit(2)
	}
	var out string
	var err error
	switch os.Args[1] {
	case "http":
		out, err = viaHTTP(os.Args[2])
	case "udp":
		out, err = viaUDP(os.Args[2])
	case "hold":
		out, err = hold(os.Args[2])
	default:
		err = fmt.Errorf("unknown protocol %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func viaHTTP(url string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

func viaUDP(addr string) (string, error) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	buf := make([]byte, 512)
	// A lost datagram is retried: the question is who it came from, not loss.
	for range 4 {
		if _, err := conn.Write([]byte("probe")); err != nil {
			return "", err
		}
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := conn.Read(buf)
		if err == nil {
			line, _, _ := strings.Cut(string(buf[:n]), "\n")
			return line, nil
		}
	}
	return "", fmt.Errorf("no answer from %s", addr)
}

// hold keeps one TCP connection to the echo server at addr and sends an
// HTTP request on it every 200 ms until stdin closes. Every answer must
// come through the same connection from the same source address and port.
func hold(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	ask := func() (string, error) {
		// A stall this long is a broken connection, not a slow answer.
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return line, err
	}
	first, err := ask()
	if err != nil {
		return "", fmt.Errorf("first request: %w", err)
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	n := 1
	for {
		select {
		case <-done:
			return fmt.Sprintf("%s %d", first, n), nil
		case <-time.After(200 * time.Millisecond):
		}
		got, err := ask()
		if err != nil {
			return "", fmt.Errorf("request %d (after %d answers from %s): %w", n+1, n, first, err)
		}
		if got != first {
			return "", fmt.Errorf("request %d answered from %s, the first from %s", n+1, got, first)
		}
		n++
	}
}
