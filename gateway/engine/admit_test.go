package engine_test

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
)

const admitPort = 9107

var (
	gw6      = netip.MustParseAddr("fd77::1")
	peer6    = netip.MustParseAddr("fd77::2")
	stranger = netip.MustParseAddr("fd77::50")
)

// startAdmitting runs the engine with the admission filter adm, and a TCP
// listener on the gateway's address at admitPort that accepts and closes.
func startAdmitting(t *testing.T, tp *topo, adm []config.Admit, listen netip.Addr) (*engine.Engine, *config.Spec) {
	t.Helper()
	spec, err := tp.config().Spec()
	if err != nil {
		t.Fatal(err)
	}
	spec.Admission = adm
	set, err := spec.Settle()
	if err != nil {
		t.Fatal(err)
	}
	tp.gw.Enter(t)
	eng, err := engine.New(set, engine.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	eng.Start()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(listen, admitPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return eng, spec
}

// dialFrom connects from src in the peer namespace to the listener on
// the gateway's address of src's family.
func (tp *topo) dialFrom(src netip.Addr, timeout time.Duration) error {
	dst := gwVTEP
	if src.Is6() {
		dst = gw6
	}
	return tp.peer.Do(func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: timeout}
		c, err := d.Dial("tcp", netip.AddrPortFrom(dst, admitPort).String())
		if err == nil {
			c.Close()
		}
		return err
	})
}

func drops(t *testing.T, eng *engine.Engine) uint64 {
	t.Helper()
	n, err := eng.AdmissionDrops("health")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAdmission: an allowed source connects, another's SYN is dropped
// (its connect times out, not refused) and counted; Reload replaces the
// rules, and Close removes the table.
func TestAdmission(t *testing.T) {
	tp := newTopo(t)
	allowed := []config.Admit{{Name: "health", Port: admitPort, From: []netip.Prefix{netip.PrefixFrom(nodeVTEP, 32)}}}
	eng, spec := startAdmitting(t, tp, allowed, gwVTEP)

	if err := tp.dialFrom(nodeVTEP, 2*time.Second); err != nil {
		t.Fatalf("allowed source %v: %v", nodeVTEP, err)
	}
	if n := drops(t, eng); n != 0 {
		t.Fatalf("%d drops after an allowed connection", n)
	}
	err := tp.dialFrom(serverIP, 300*time.Millisecond) // a SYN that must not be answered
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("disallowed source %v: connect gave %v, want a timeout (SYN dropped)", serverIP, err)
	}
	if n := drops(t, eng); n == 0 {
		t.Fatal("the dropped SYN was not counted")
	}

	// Reload with the other source allowed: it connects, and the counter
	// keeps its count.
	before := drops(t, eng)
	s := *spec
	s.Admission = []config.Admit{{Name: "health", Port: admitPort, From: []netip.Prefix{netip.MustParsePrefix("10.77.0.48/28")}}}
	set, err := s.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	if err := tp.dialFrom(serverIP, 2*time.Second); err != nil {
		t.Fatalf("source %v, allowed after the reload: %v", serverIP, err)
	}
	if n := drops(t, eng); n != before {
		t.Fatalf("counter %d after the reload, want %d kept", n, before)
	}

	// Without admission the table goes, and everyone connects.
	s.Admission = nil
	if set, err = s.Settle(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, tp, engine.AdmitTable) {
		t.Fatalf("table %s left after a reload without admission", engine.AdmitTable)
	}
	s.Admission = allowed
	if set, err = s.Settle(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	if !hasTable(t, tp, engine.AdmitTable) {
		t.Fatalf("table %s missing", engine.AdmitTable)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, tp, engine.AdmitTable) {
		t.Fatalf("table %s left after Close", engine.AdmitTable)
	}
}

// TestAdmissionSwapHasNoWindow floods SYNs from a source no version of the
// rules allows while the rules are replaced 100 times: not one reaches the
// listener (no SYN-ACK comes back), so no replacement ever leaves the
// chains empty. An allowed source connects before and after.
func TestAdmissionSwapHasNoWindow(t *testing.T) {
	tp := newTopo(t)
	from := func(extra string) []config.Admit {
		return []config.Admit{{Name: "health", Port: admitPort,
			From: []netip.Prefix{netip.PrefixFrom(nodeVTEP, 32), netip.MustParsePrefix(extra)}}}
	}
	eng, spec := startAdmitting(t, tp, from("192.0.2.0/24"), gwVTEP)
	if err := tp.dialFrom(nodeVTEP, 2*time.Second); err != nil {
		t.Fatalf("allowed source %v: %v", nodeVTEP, err)
	}

	eth := &layers.Ethernet{SrcMAC: tp.p0.MAC, DstMAC: tp.d0.MAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: serverIP.AsSlice(), DstIP: gwVTEP.AsSlice()}
	var stop atomic.Bool
	var sent atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sport := uint16(20000); !stop.Load(); sport++ {
			syn := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: admitPort, SYN: true, Seq: 1, Window: 65535}
			syn.SetNetworkLayerForChecksum(ip)
			if err := tp.raw.Send(serialize(t, eth, ip, syn)); err == nil {
				sent.Add(1)
			}
		}
	}()
	last := uint64(0)
	for i := range 100 {
		s := *spec
		s.Admission = from([]string{"192.0.2.0/24", "198.51.100.0/24"}[i%2])
		set, err := s.Settle()
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Reload(set); err != nil {
			t.Fatal(err)
		}
		n := drops(t, eng)
		if n < last {
			t.Fatalf("swap %d: drop counter went back from %d to %d", i, last, n)
		}
		last = n
	}
	stop.Store(true)
	wg.Wait()
	if sent.Load() == 0 || last == 0 {
		t.Fatalf("%d SYNs sent, %d dropped: the checker did not run", sent.Load(), last)
	}
	// sleep: a SYN-ACK that must not come; each one admitted is answered at once.
	for f := tp.raw.Next(200 * time.Millisecond); f != nil; f = tp.raw.Next(200 * time.Millisecond) {
		d := decode(f)
		if d.tcp != nil && d.tcp.SYN && d.tcp.ACK && d.tcp.SrcPort == admitPort && d.outer.DstIP.Equal(serverIP.AsSlice()) {
			t.Fatalf("a SYN from %v was answered during the swaps (port %d): the filter had a window", serverIP, d.tcp.DstPort)
		}
	}
	t.Logf("%d SYNs sent during 100 swaps, %d counted as dropped, none answered", sent.Load(), drops(t, eng))
	if err := tp.dialFrom(nodeVTEP, 2*time.Second); err != nil {
		t.Fatalf("allowed source %v after the swaps: %v", nodeVTEP, err)
	}
}

// TestAdmissionIPv6: the same over IPv6, for a host and for a prefix
// (the masked match).
func TestAdmissionIPv6(t *testing.T) {
	tp := newTopo(t)
	tp.gw.AddAddr(t, "d0", netip.PrefixFrom(gw6, 64))
	tp.peer.AddAddr(t, "p0", netip.PrefixFrom(peer6, 64), netip.PrefixFrom(stranger, 64))
	eng, spec := startAdmitting(t, tp, []config.Admit{{Name: "health", Port: admitPort,
		From: []netip.Prefix{netip.PrefixFrom(nodeVTEP, 32), netip.PrefixFrom(peer6, 128)}}}, gw6)
	if err := tp.dialFrom(peer6, 2*time.Second); err != nil {
		t.Fatalf("allowed source %v: %v", peer6, err)
	}
	err := tp.dialFrom(stranger, 300*time.Millisecond) // a SYN that must not be answered
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("disallowed source %v: connect gave %v, want a timeout (SYN dropped)", stranger, err)
	}
	if n := drops(t, eng); n == 0 {
		t.Fatal("the dropped SYN was not counted")
	}
	s := *spec
	s.Admission = []config.Admit{{Name: "health", Port: admitPort, From: []netip.Prefix{netip.MustParsePrefix("fd77::/120")}}}
	set, err := s.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	if err := tp.dialFrom(stranger, 2*time.Second); err != nil {
		t.Fatalf("source %v in fd77::/120: %v", stranger, err)
	}
}
