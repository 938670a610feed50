// Command probe runs inside the end-to-end test's pods and asks the outside
// echo server (egret lab echo-server) which source address it saw:
//
//	probe http http://10.80.0.1:8080/   → prints "<ip>:<port>"
//	probe udp 10.80.0.1:8081            → prints "<ip>:<port>"
//	probe hold 10.80.0.1:8080 [PORT]    → one keep-alive HTTP connection (from
//	                                       source port PORT if given), a request
//	                                       every 200 ms until stdin closes, then
//	                                       one more; prints "<ip>:<port>" at the
//	                                       first answer and "<n>" answers at the
//	                                       end, and fails if an answer came from
//	                                       another source or the connection broke
//	probe dial HOST:PORT                → prints "connected" once a TCP connection
//	                                       opens within 3 s, else fails (a dropped
//	                                       SYN: "i/o timeout")
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
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 && (len(os.Args) != 4 || os.Args[1] != "hold") {
		fmt.Fprintln(os.Stderr, "usage: probe http URL | probe udp HOST:PORT | probe hold HOST:PORT [SOURCE-PORT] | probe dial HOST:PORT")
		os.Exit(2)
	}
	var out string
	var err error
	switch os.Args[1] {
	case "http":
		out, err = viaHTTP(os.Args[2])
	case "udp":
		out, err = viaUDP(os.Args[2])
	case "dial":
		var c net.Conn
		if c, err = net.DialTimeout("tcp", os.Args[2], 3*time.Second); err == nil {
			c.Close()
			out = "connected"
		}
	case "hold":
		port := 0
		if len(os.Args) == 4 {
			if port, err = strconv.Atoi(os.Args[3]); err != nil {
				break
			}
		}
		out, err = hold(os.Args[2], port)
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

// hold keeps one TCP connection to the echo server at addr, from source
// port port (0: the kernel's choice), and sends an HTTP request on it
// every 200 ms until stdin closes, then one more: the last answer comes
// after whatever the caller did meanwhile. Every answer must come through
// the same connection from the same source address and port. The first
// answer is printed at once, so the caller learns the source the server
// saw while the connection is open.
func hold(addr string, port int) (string, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
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
	fmt.Println(first)
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	n := 1
	for last := false; !last; n++ {
		select {
		case <-done:
			last = true
		case <-time.After(200 * time.Millisecond):
		}
		got, err := ask()
		if err != nil {
			return "", fmt.Errorf("request %d (after %d answers from %s): %w", n+1, n, first, err)
		}
		if got != first {
			return "", fmt.Errorf("request %d answered from %s, the first from %s", n+1, got, first)
		}
	}
	return strconv.Itoa(n), nil
}
