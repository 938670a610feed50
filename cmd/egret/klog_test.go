package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJSONLogsIncludeClientGo runs egret controller with --log-format=json
// against an API server that drops every connection, so that client-go's
// leader election logs its failure through klog, and checks that every line
// on stderr is a JSON object, client-go's among them.
func TestJSONLogsIncludeClientGo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://%s"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, ln.Addr())
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "controller", "--log-format=json", "--metrics-addr=off",
		"--kubeconfig="+kubeconfig, "--identity=klog-test")
	cmd.Env = append(os.Environ(), "EGRET_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// Stop the controller once client-go has logged; a controller that
	// exits first closes lines, and one that never logs times out.
	timeout := time.After(time.Minute)
	var all []string
	seen := false
wait:
	for !seen {
		select {
		case l, ok := <-lines:
			if !ok {
				break wait
			}
			all = append(all, l)
			seen = strings.Contains(l, "retrieving lease lock") // client-go leaderelection, through klog
		case <-timeout:
			break wait
		}
	}
	cmd.Process.Kill()
	for l := range lines {
		all = append(all, l)
	}
	cmd.Wait()
	for _, l := range all {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("stderr line is not JSON: %q", l)
		}
	}
	if !seen {
		t.Fatalf("client-go's leader election never logged its failure; stderr:\n%s", strings.Join(all, "\n"))
	}
}
