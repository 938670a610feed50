// Command probe runs inside the end-to-end test's pods and asks the outside
// echo server (egret lab echo-server) which source address it saw:
//
//	probe http http://10.80.0.1:8080/   → prints "<ip>:<port>"
//	probe udp 10.80.0.1:8081            → prints "<ip>:<port>"
//
// busybox has wget but no UDP client, hence this. Built static by the test.
package main

import (
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
		fmt.Fprintln(os.Stderr, "usage: probe http URL | probe udp HOST:PORT")
		os.Exit(2)
	}
	var out string
	var err error
	switch os.Args[1] {
	case "http":
		out, err = viaHTTP(os.Args[2])
	case "udp":
		out, err = viaUDP(os.Args[2])
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
