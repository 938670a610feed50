package lab

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// syncedConn is a connection through the gateway the managed test kills
// whose port was not preserved: only the flow sync to the standby of its
// egress IP can carry it through the failover (the pick-up would take the
// pod's own port, which another connection holds, or which the server does
// not know for it).
type syncedConn struct {
	conn, blocker *KeepAlive
	seen, held    netip.AddrPort
	ip            netip.Addr
	standby       string
}

// startSynced opens a connection through gw whose port is not preserved,
// on gw's egress IP of blue, and waits until the standby the controller
// recorded for that IP (egret.io/standby) holds flows for it.
func startSynced(t *testing.T, l *Lab, st *Status, gw string) *syncedConn {
	t.Helper()
	var ip netip.Addr
	var third string
	for _, a := range st.Assignment {
		if a.EgressIP == "blue" && a.Node == gw {
			ip, third = a.IP, a.Standby
		}
	}
	if !ip.IsValid() || third == "" {
		t.Fatalf("the killed gateway %s hosts no IP of blue with a standby (%v): the sync check needs one", gw, st.Assignment)
	}

	blue := bluePods(st)
	if len(blue) < 2 {
		t.Fatalf("blue selects %d pods; the check needs two", len(blue))
	}
	server := netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort).String()
	for try := range 64 {
		port := 30000 + (os.Getpid()*7+try*131)%20000
		first, err := dialFrom(blue[0].Namespace, server, port)
		if err != nil {
			continue // the port is in use in the pod: another
		}
		held, err := first.Get(10 * time.Second)
		if err != nil || held.Addr() != ip || held.Port() != uint16(port) {
			first.Close()
			continue
		}
		second, err := dialFrom(blue[1].Namespace, server, port)
		if err != nil {
			first.Close()
			continue
		}
		seen, err := second.Get(10 * time.Second)
		if err != nil || seen.Addr() != ip || seen.Port() == uint16(port) {
			first.Close()
			second.Close()
			continue
		}
		t.Cleanup(func() { first.Close(); second.Close() })
		sc := &syncedConn{conn: second, blocker: first, seen: seen, held: held, ip: ip, standby: third}
		nstest.UntilEvery(t, fmt.Sprintf("the standby %s of %v holding 2 backup flows", third, ip), 15*time.Second, 100*time.Millisecond, func() (bool, string) {
			n := gatewayMetric(t, l.Spec, third, "egret_gateway_sync_backup_flows")
			return n >= 2, fmt.Sprint(n)
		})
		// A few scans more of gw's sync: every flow of the IP is there.
		for range 3 {
			looked := gatewayMetric(t, l.Spec, gw, "egret_gateway_sync_slots_looked_total")
			nstest.UntilEvery(t, "a scan of "+gw+"'s flow sync", 10*time.Second, 100*time.Millisecond, func() (bool, string) {
				return gatewayMetric(t, l.Spec, gw, "egret_gateway_sync_slots_looked_total") > looked, ""
			})
		}
		t.Logf("connection from %s seen as %v (port %d not preserved: %s holds it as %v); %s stands by for %v",
			blue[1].Name, seen, port, blue[0].Name, held, third, ip)
		return sc
	}
	t.Fatalf("64 pairs of connections from one source port through %v: none had the second's port not preserved", ip)
	return nil
}

// check asks on both connections after the failover: each must answer,
// seen as before.
func (sc *syncedConn) check(t *testing.T) {
	after, err := sc.conn.Get(10 * time.Second)
	if err != nil {
		t.Fatalf("connection seen as %v (port not preserved) after its gateway was killed: %v; its standby %s should have held its flow", sc.seen, err, sc.standby)
	}
	held, err := sc.blocker.Get(10 * time.Second)
	if err != nil {
		t.Fatalf("connection seen as %v (port preserved) after its gateway was killed: %v", sc.held, err)
	}
	if after != sc.seen || held != sc.held {
		t.Errorf("after the failover the server saw %v and %v, before %v and %v", after, held, sc.seen, sc.held)
	}
	t.Logf("both connections went on through the kill: %v (port not preserved, carried by the synced flow) and %v", after, held)
}

// dialFrom opens a keep-alive connection from namespace ns with source
// port port.
func dialFrom(ns, server string, port int) (*KeepAlive, error) {
	var c net.Conn
	err := Do(ns, func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{Port: port}, Timeout: 5 * time.Second}
		var err error
		c, err = d.Dial("tcp", server)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &KeepAlive{conn: c, br: bufio.NewReader(c)}, nil
}
