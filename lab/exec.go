package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/internal/nsenter"
)

// run executes a command and returns its output; the error names the
// command and quotes its stderr so a user can act on it.
func run(name string, args ...string) (string, error) {
	return runIn("", name, args...)
}

// runIn is run with input on stdin.
func runIn(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out.String(), nil
}

// ipBatch runs `ip -n ns -batch -` (or in the current namespace when ns is
// ""): one process for many commands.
func ipBatch(ns string, lines ...string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	_, err := runIn(strings.Join(lines, "\n")+"\n", "ip", args...)
	return err
}

// nsExec runs a command inside namespace ns with `ip netns exec`.
func nsExec(ns string, name string, args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Do runs fn on an OS thread switched into network namespace ns. Sockets
// created inside fn stay in ns after Do returns.
func Do(ns string, fn func() error) error {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", ns, err)
	}
	defer h.Close()
	return nsenter.Do(h, fn)
}

// DialContext opens a connection from inside network namespace ns, e.g. from
// a pod: the socket belongs to ns for its whole life.
func DialContext(ctx context.Context, ns, network, address string) (net.Conn, error) {
	var c net.Conn
	err := Do(ns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// ListenPacket opens a packet socket inside network namespace ns.
func ListenPacket(ns, network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := Do(ns, func() error {
		var err error
		c, err = net.ListenPacket(network, address)
		return err
	})
	return c, err
}
