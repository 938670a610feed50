package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/nat"
)

// TestFlowsSocket serves a real pipeline's flow table on a Unix socket and
// reads it back as `egret flows` does: every flow with its binding and
// state, the egress IP filter, the backup flag of a flow whose egress IP is
// not hosted, the socket's mode, and the errors a user sees.
func TestFlowsSocket(t *testing.T) {
	p, now := flowTable(t)
	sock := filepath.Join(t.TempDir(), "flows.sock")
	var running atomic.Pointer[gateway.Pipeline] // nil: the data plane has not started
	stop, err := serveFlows(sock, flowsHandler(func() (*gateway.Pipeline, int64) { return running.Load(), now() }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v (%v), want 0600: the flows name every pod's peers", st.Mode(), err)
	}
	var out bytes.Buffer
	if err := listFlows(&out, sock, "", true); err == nil || !strings.Contains(err.Error(), "not running yet") {
		t.Errorf("before the data plane runs: %v, want it said", err)
	}
	running.Store(p)

	out.Reset()
	if err := listFlows(&out, sock, "", true); err != nil {
		t.Fatal(err)
	}
	var got []flowEntry
	dec := json.NewDecoder(&out)
	for dec.More() {
		var e flowEntry
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 2 {
		t.Fatalf("%d flows listed, want 2: %+v", len(got), got)
	}
	for _, e := range got {
		i := int(e.Pod.Port()) - 1000
		want := flowEntry{Proto: "tcp", Pod: netip.AddrPortFrom(flowsPod, uint16(1000+i)), Server: netip.AddrPortFrom(flowsServer, 443),
			EgressIP: []netip.Addr{flowsHosted, flowsOther}[i], EgressPort: uint16(2000 + i), State: "ESTABLISHED", Backup: i == 1}
		e.ExpiresIn, want.ExpiresIn = 0, 0
		if e != want {
			t.Errorf("listed %+v, want %+v", e, want)
		}
	}
	out.Reset()
	if err := listFlows(&out, sock, "?egressIP="+flowsOther.String(), false); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Count(s, "\n") != 2 || !strings.Contains(s, "192.0.2.99:2001") || !strings.Contains(s, "backup") || strings.Contains(s, flowsHosted.String()) {
		t.Errorf("table of the flows of %v:\n%s", flowsOther, s)
	}
	if err := listFlows(&out, sock, "?egressIP=bogus", false); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Errorf("a bad egressIP: %v", err)
	}
	if err := listFlows(&out, filepath.Join(t.TempDir(), "none.sock"), "", false); err == nil || !strings.Contains(err.Error(), "--flows-socket") {
		t.Errorf("no gateway: %v, want the flag named", err)
	}
}

// The addresses of flowTable's flows.
var (
	flowsHosted, flowsOther = netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.99")
	flowsPod, flowsServer   = netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("198.51.100.20")
)

// flowTable is a real pipeline whose policy gives flowsPod the egress IP
// flowsHosted, holding two established flows of flowsPod to flowsServer:
// one as flowsHosted (port 1000 → 2000) and one as flowsOther (1001 →
// 2001), an IP it does not host.
// now is the pipeline's clock.
func flowTable(t *testing.T) (*gateway.Pipeline, func() int64) {
	vtep, node := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	tunnel := gateway.TunnelVNI{Tunnel: gateway.TunnelVXLAN, VNI: 4096}
	ct, err := conntrack.New(conntrack.Config{MaxFlows: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ct.Close)
	p, err := gateway.NewPipeline(ct, nat.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := gateway.NewSnapshot(gateway.Config{
		VTEPs: []netip.Addr{vtep}, InnerMAC: [6]byte{2, 0, 0, 0, 0xee, 1}, Tunnels: []gateway.TunnelVNI{tunnel},
		Nodes: []gateway.Node{{Name: "node1", VTEP: node, InnerMAC: [6]byte{2, 0, 0, 0, 1, 1},
			Pods: []gateway.Pod{{Addr: flowsPod, Policy: "web"}}}},
		Policies: []gateway.Policy{{Name: "web", EgressIPs: []netip.Addr{flowsHosted}}},
		Routes:   route.NewStatic(route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: route.Hop{Ifindex: 7, MTU: 1500}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Swap(snap); err != nil {
		t.Fatal(err)
	}
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }
	for i, ip := range []netip.Addr{flowsHosted, flowsOther} {
		f := conntrack.Flow{Orig: conntrack.Tuple{Src: flowsPod.As16(), Dst: flowsServer.As16(), SrcPort: uint16(1000 + i), DstPort: 443, Proto: conntrack.ProtoTCP},
			NATAddr: ip.As16(), NATPort: uint16(2000 + i), State: conntrack.StateEstablished}
		if err := p.Adopt(&f, gateway.ReturnPath{VTEP: node, Tunnel: tunnel}, time.Minute, now()); err != nil {
			t.Fatal(err)
		}
	}
	return p, now
}

// lockedBuffer is a bytes.Buffer the stream writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFlowsDropsStream streams a real pipeline's drop samples over the
// flows socket as `egret flows --drops` does, as JSON and as a table, two
// clients at once; an interrupt ends the stream without an error; --rate
// and the socket's rate are checked.
func TestFlowsDropsStream(t *testing.T) {
	p, now := flowTable(t)
	sock := filepath.Join(t.TempDir(), "flows.sock")
	stop, err := serveFlows(sock, flowsHandler(func() (*gateway.Pipeline, int64) { return p, now() }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	ctx, cancel := context.WithCancel(context.Background())
	var js, table lockedBuffer
	errs := make(chan error, 2)
	go func() { errs <- streamDropsFrom(ctx, &js, sock, 1000, true) }()
	go func() { errs <- streamDropsFrom(ctx, &table, sock, 1000, false) }()
	w := p.NewProcessor(1)
	runt := make([]byte, 10) // shorter than an Ethernet header: malformed
	res := make([]gateway.Result, 1)
	// Until both clients are subscribed, a drop reaches only one or none.
	if !nstest.Poll(10*time.Second, 20*time.Millisecond, func() bool {
		w.Process(now(), [][]byte{runt}, [][]byte{make([]byte, 64)}, res)
		return strings.Contains(js.String(), "\n") && strings.Contains(table.String(), "malformed")
	}) {
		t.Fatalf("no sample streamed: json %q, table %q", js.String(), table.String())
	}
	if res[0].Verdict != gateway.VerdictDrop || res[0].Reason != gateway.DropMalformed {
		t.Fatalf("the runt frame was %v %v", res[0].Verdict, res[0].Reason)
	}
	cancel()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("interrupted stream: %v, want nil", err)
		}
	}
	var e dropEntry
	if err := json.Unmarshal([]byte(strings.SplitN(js.String(), "\n", 2)[0]), &e); err != nil {
		t.Fatal(err)
	}
	if e.Reason != "malformed" || e.Len != 10 || e.Proto != "" || e.Pod != "" || time.Since(e.Time) > time.Minute {
		t.Errorf("sample %+v, want reason malformed, len 10, nothing decoded", e)
	}
	lines := strings.Split(table.String(), "\n")
	if !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], "malformed") || !strings.Contains(lines[1], " 10 ") {
		t.Errorf("table:\n%s", table.String())
	}

	for _, c := range []struct {
		in   string
		want int
	}{{"", defaultDropRate}, {"5", 5}, {"5/s", 5}, {"1000/s", 1000}, {"0", 0}, {"1001", 0}, {"5/m", 0}, {"x", 0}} {
		n, err := parseDropRate(c.in)
		if n != c.want || (err != nil) != (c.want == 0) {
			t.Errorf("--rate %q: %d, %v; want %d", c.in, n, err, c.want)
		}
	}
	if err := streamDropsFrom(context.Background(), io.Discard, sock, 0, true); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("rate 0 on the socket: %v, want 400", err)
	}
}
