package lab

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
)

// WaitAssigned waits until every EgressIP of the managed lab has each of
// its egress IPs assigned to a node, and returns them.
func (l *Lab) WaitAssigned(limit time.Duration) ([]egressv1.EgressIP, error) {
	objs := ObjectsDir(l.RunDir())
	deadline := time.Now().Add(limit)
	for {
		eips, err := EgressIPs(objs)
		if err == nil && len(eips) > 0 && fullyAssigned(eips) {
			return eips, nil
		}
		if time.Now().After(deadline) {
			var have []string
			for _, e := range eips {
				have = append(have, fmt.Sprintf("%s %v", e.Name, e.Status.Items))
			}
			return nil, fmt.Errorf("the controller has not assigned every egress IP after %v (%s; err %v); controller log: %s",
				limit, strings.Join(have, "; "), err, tail(filepath.Join(l.RunDir(), "controller.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fullyAssigned(eips []egressv1.EgressIP) bool {
	for _, e := range eips {
		if len(e.Status.Items) != len(e.Spec.EgressIPs) {
			return false
		}
	}
	return true
}

// WaitSources waits until a UDP echo from every pod is seen by the server
// with one of the pod's expected sources (its object's assigned egress
// IPs, or its node's IP), and the same over IPv6 from every dual-stack pod
// with an IPv6 source to expect.
func (l *Lab) WaitSources(limit time.Duration) error {
	s := l.Spec
	deadline := time.Now().Add(limit)
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			for _, v6 := range []bool{false, true} {
				srv := netip.AddrPortFrom(s.Server.IP, UDPPort).String()
				if v6 {
					if !p.IP6.IsValid() || !s.Server.IP6.IsValid() {
						continue
					}
					srv = netip.AddrPortFrom(s.Server.IP6, UDPPort).String()
				}
				var last string
				for ok := false; !ok; {
					st, err := l.Status()
					if err != nil {
						return err
					}
					if !st.Up {
						// Up has not written its state file yet: read the
						// controller's assignment all the same, not the
						// static one.
						st.managedView(s, l.RunDir())
					}
					want := st.Pod(p.Name).ExpectedSources
					if v6 {
						want = st.Pod(p.Name).ExpectedSources6
					}
					if len(want) == 0 {
						break // selected, but no egress IP of this family: held back
					}
					got, err := UDPSource(s.NS(p.Name), srv, 300*time.Millisecond)
					ok = err == nil && slices.Contains(want, got.Addr())
					if !ok {
						last = fmt.Sprintf("server %s saw %v (err %v), want one of %v", srv, got, err, want)
						if time.Now().After(deadline) {
							return fmt.Errorf("pod %s: no UDP echo with the expected source within %v: %s; steer log: %s",
								p.Name, limit, last, tail(filepath.Join(l.RunDir(), "steer-"+w.Name+".log")))
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}
		}
	}
	return nil
}

// UDPSource sends one datagram from namespace ns to the echo server at srv
// on a new socket and returns the source the server saw.
func UDPSource(ns, srv string, timeout time.Duration) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := DialContext(ctx, ns, "udp", srv)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	if _, err := c.Write([]byte("source?")); err != nil {
		return netip.AddrPort{}, err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return netip.AddrPort{}, err
	}
	head, _, _ := strings.Cut(string(buf[:n]), "\n")
	return netip.ParseAddrPort(strings.TrimSpace(head))
}
