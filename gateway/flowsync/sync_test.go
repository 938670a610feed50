package flowsync

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/nat"
)

// TestStandbyMirrorsPrimary: the standby's table holds exactly the
// primary's flows of the egress IPs it stands by for, with their bindings
// and states, through creation, state changes and removal, IPv4 and IPv6;
// flows of other IPs are not sent.
func TestStandbyMirrorsPrimary(t *testing.T) {
	a, b := newPipeline(t, 1<<14, egress, egress6), newPipeline(t, 1<<14)
	_, addr := standby(t, b)
	for i := range 200 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(map[netip.Addr]string{egress: addr, egress6: addr})
	sa.Start()
	waitMatch(t, a, b)

	churn(t, a)
	waitMatch(t, a, b)
	if got := len(table(b, egress, egress6)); got != 200 {
		t.Fatalf("standby holds %d flows, want 200", got)
	}
	st := sa.Stats()
	if st.FullResyncs != 1 || st.Stalls != 0 {
		t.Fatalf("sender stats %+v: want one full resync (the session's start) and no stall", st)
	}
	rb := b.NAT()
	if n := rb.PortsInUse(nat.Addr(egress.As16()), conntrack.ProtoTCP); n != 100 {
		t.Fatalf("standby's NAT allocator holds %d IPv4 ports of the backup flows, want 100", n)
	}
}

// TestBackupFlowsTakeOver: a backup flow answers nothing while the standby
// does not host its egress IP (a reply to the IP is not for this gateway),
// the standby's own flows never take its port, and once the IP is hosted
// the server's next segment goes to the pod at once.
func TestBackupFlowsTakeOver(t *testing.T) {
	a, b := newPipeline(t, 1<<10, egress), newPipeline(t, 1<<10)
	_, addr := standby(t, b)
	f := flow(0, conntrack.StateEstablished)
	f.NATPort = 55555 // not the pod's port: pick-up could not save it
	adopt(t, a, f)
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(map[netip.Addr]string{egress: addr})
	sa.Start()
	waitMatch(t, a, b)

	w := b.NewProcessor(1)
	reply := tcpFrame(t, server, egress, 443, 55555)
	if r := process(w, reply); r.Verdict != gateway.VerdictPass {
		t.Fatalf("a reply to an egress IP the standby does not host: %v, want pass (untouched, not answered)", r.Verdict)
	}
	// The standby's own flow to the same server port on the same IP never
	// gets the backup flow's port, even when the pod asks for it.
	for i := range 100 {
		p, err := b.NAT().Allocate(conntrack.ProtoTCP, nat.Addr(pod.As16()), 55555, nat.Addr(server.As16()), 443, nat.Addr(egress.As16()), uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if p == 55555 {
			t.Fatal("the standby allocated the port a backup flow holds")
		}
	}

	host(t, b, egress)
	r := process(w, reply)
	if r.Verdict != gateway.VerdictTx {
		t.Fatalf("after the takeover the server's segment: %v (%v), want tx to the pod", r.Verdict, r.Reason)
	}
	if r.Ifindex != 8 {
		t.Fatalf("sent out of interface %d, want 8 (the tunnel to the pod's node)", r.Ifindex)
	}
}

// TestResyncAfterLoss: a session cut while the primary changes flows (some
// removed, some new) is followed by a full resync, counted, after which the
// standby matches again: removals it never heard of included.
func TestResyncAfterLoss(t *testing.T) {
	a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
	_, addr := standby(t, b)
	px := newProxy(t, addr)
	for i := range 100 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(peers(px.addr()))
	sa.Start()
	waitMatch(t, a, b)

	px.ln.Close() // no new session until the changes are made
	px.cut()
	for i := range 30 {
		f := flow(i, conntrack.StateEstablished)
		a.Abandon(&f)
		adopt(t, a, flow(500+i, conntrack.StateEstablished))
	}
	nstest.Eventually(t, "a failed attempt", syncWait, func() bool { return sa.Stats().ConnectFail >= 1 })
	ln, err := net.Listen("tcp", px.addr())
	if err != nil {
		t.Fatal(err)
	}
	px2 := &proxy{ln: ln, target: addr, resume: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); px2.cut() })
	go acceptInto(px2)
	nstest.Eventually(t, "second resync", syncWait, func() bool { return sa.Stats().FullResyncs >= 2 })
	waitMatch(t, a, b)
}

// acceptInto runs p's accept loop (newProxy's, for a listener made by hand).
func acceptInto(p *proxy) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, d)
		p.mu.Unlock()
		go p.pipe(d, c)
		go p.pipe(c, d)
	}
}

// TestSlowPeerBounded: a standby that stops reading gets at most the window
// (plus one batch) of unacknowledged data, whatever the primary has to
// send; once it has not acknowledged for StallAfter it is dropped (counted)
// and, when it reads again, gets a full resync and matches.
func TestSlowPeerBounded(t *testing.T) {
	const window = 64 << 10
	a, b := newPipeline(t, 1<<15, egress, egress6), newPipeline(t, 1<<15)
	_, addr := standby(t, b)
	px := newProxy(t, addr)
	sa := newSync(t, "primary", testKey, a, func(c *Config) { c.Window, c.StallAfter = window, 300*time.Millisecond })
	sa.SetPeers(peers(px.addr()))
	sa.Start()
	nstest.Eventually(t, "session", syncWait, func() bool { return sa.Stats().FullResyncs == 1 })
	px.pause()
	for i := range 20000 { // ~0.8 MB of records, 12× the window
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	nstest.Eventually(t, "stall", syncWait, func() bool { return sa.Stats().Stalls >= 1 })
	if st := sa.Stats(); st.BytesSent > window+batchBytes+msgHeader {
		t.Fatalf("sent %d bytes to a peer that acknowledged nothing; the window is %d", st.BytesSent, window)
	}
	px.unpause()
	waitMatch(t, a, b)
	if st := sa.Stats(); st.FullResyncs < 2 {
		t.Fatalf("stats %+v: no full resync after the stall", st)
	}
}

// TestWrongKeyRefused: a primary with another key neither gets its flows
// held nor learns anything (the standby does not prove a key it lacks
// either way round); each attempt is refused and counted on both sides.
// A connection that speaks something else is refused too.
func TestWrongKeyRefused(t *testing.T) {
	a, b := newPipeline(t, 1<<10, egress), newPipeline(t, 1<<10)
	sb, addr := standby(t, b)
	adopt(t, a, flow(0, conntrack.StateEstablished))
	sa := newSync(t, "intruder", otherKey, a, nil)
	sa.SetPeers(map[netip.Addr]string{egress: addr})
	sa.Start()
	nstest.Eventually(t, "refusals", syncWait, func() bool { return sb.Stats().Refused >= 2 && sa.Stats().ConnectFail >= 2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123456789"))
	before := sb.Stats().Refused
	nstest.Eventually(t, "refused garbage", syncWait, func() bool { return sb.Stats().Refused > before })
	c.Close()
	if n := len(table(b, egress)); n != 0 || sb.Stats().BackupFlows != 0 {
		t.Fatalf("the standby holds %d flows sent without the key", n)
	}
	if st := sa.Stats(); st.FullResyncs != 0 || st.BytesSent != 0 {
		t.Fatalf("the primary sent flows to a peer that did not prove the key: %+v", st)
	}
	// A standby without the key gets nothing from a primary with it.
	fake := newSync(t, "fake", otherKey, newPipeline(t, 1<<10), nil)
	if err := fake.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	sa2 := newSync(t, "primary", testKey, a, nil)
	sa2.SetPeers(map[netip.Addr]string{egress: fake.Addr().String()})
	sa2.Start()
	nstest.Eventually(t, "refused by the primary", syncWait, func() bool { return sa2.Stats().ConnectFail >= 1 })
	if st := sa2.Stats(); st.BytesSent != 0 {
		t.Fatalf("the primary sent %d bytes to a standby without the key", st.BytesSent)
	}
}

// TestMalformedCounted: authenticated messages that do not parse (unknown
// item, truncated or impossible record, a flow naming a return path never
// sent, a sequence number going back, an unknown type) drop the session,
// are counted, and never panic; what the session applied before stays.
func TestMalformedCounted(t *testing.T) {
	b := newPipeline(t, 1<<10)
	sb, addr := standby(t, b)
	good := appendPath(nil, 7, path)
	f := flow(0, conntrack.StateEstablished)
	f.Aux = 7
	good = conntrack.AppendRecord(append(good, itemUpsert), &f, time.Hour)
	rec := conntrack.AppendRecord(nil, &f, time.Hour)
	bad := [][]byte{
		{'X'},
		append([]byte{itemUpsert}, rec[:10]...),
		append([]byte{itemUpsert, 2, 1, 6, 99}, rec[4:]...), // state 99
		func() []byte { g := f; g.Aux = 8; return conntrack.AppendRecord([]byte{itemUpsert}, &g, 0) }(),
		append([]byte{itemPath}, 1, 2, 3),
	}
	for i, items := range bad {
		s := dial(t, addr)
		send(t, s, msgBatch, 10, good)
		if typ, seq := recvAck(t, s); typ != msgAck || seq != 10 {
			t.Fatalf("case %d: ack %d/%d, want %d/10", i, typ, seq, msgAck)
		}
		before := sb.Stats().Malformed
		send(t, s, msgBatch, 20, items)
		nstest.Eventually(t, "malformed counted", syncWait, func() bool { return sb.Stats().Malformed == before+1 })
		s.c.Close()
	}
	for i, m := range []struct {
		typ byte
		seq uint64
	}{{msgBatch, 5}, {msgAck, 20}, {77, 20}} {
		s := dial(t, addr)
		send(t, s, msgBatch, 10, good)
		recvAck(t, s)
		before := sb.Stats().Malformed
		send(t, s, m.typ, m.seq, nil)
		nstest.Eventually(t, "malformed counted", syncWait, func() bool { return sb.Stats().Malformed == before+1 })
		s.c.Close()
		_ = i
	}
	if n := len(table(b, egress)); n != 1 {
		t.Fatalf("the standby holds %d flows, want the one good flow", n)
	}
}

func dial(t *testing.T, addr string) *session {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := clientHandshake(c, testKey, "primary", syncVersions)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func send(t *testing.T, s *session, typ byte, seq uint64, items []byte) {
	t.Helper()
	if err := s.write(append(appendHeader(nil, typ, seq), items...)); err != nil {
		t.Fatal(err)
	}
}

func recvAck(t *testing.T, s *session) (byte, uint64) {
	t.Helper()
	msg, err := s.read(nil)
	if err != nil {
		t.Fatal(err)
	}
	typ, seq, _, err := header(msg)
	if err != nil {
		t.Fatal(err)
	}
	return typ, seq
}

// FuzzApply: whatever an authenticated peer sends, applying it returns an
// error or nothing, never panics.
func FuzzApply(f *testing.F) {
	fl := flow(0, conntrack.StateEstablished)
	f.Add(conntrack.AppendRecord(append(appendPath(nil, 0, path), itemUpsert), &fl, time.Hour))
	f.Add([]byte{itemBegin, itemEnd})
	f.Add(conntrack.AppendRecord([]byte{itemDelete}, &fl, 0))
	p := newPipeline(f, 1<<10)
	s := newSync(f, "fuzz", testKey, p, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		s.apply("primary", testAdmission(), b, map[uint32]gateway.ReturnPath{}, nil)
	})
}

// TestOwnLeftoverReplaced: the standby still holds its own copy of a flow
// from when it hosted the egress IP (the IP moved to the peer, which now
// sends the flow back to it): the peer's copy, in a later state, replaces
// it instead of failing to adopt, so the standby is in step.
func TestOwnLeftoverReplaced(t *testing.T) {
	a, b := newPipeline(t, 1<<10, egress, egress6), newPipeline(t, 1<<10)
	for i := range 10 {
		adopt(t, b, flow(i, conntrack.StateEstablished)) // b's leftovers
		adopt(t, a, flow(i, conntrack.StateFinWait))     // the connections went on closing at a
	}
	s, addr := standby(t, b)
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(map[netip.Addr]string{egress: addr, egress6: addr})
	sa.Start()
	waitMatch(t, a, b)
	if st := s.Stats(); st.AdoptFailed != 0 || st.BackupFlows != 10 {
		t.Fatalf("standby stats %+v: want the 10 flows held, none failed", st)
	}
}

// scanning is a primary whose scans the test runs one at a time (no scan
// loop), at the default interval's sweep pace, with its session to the
// standby at addr up.
func scanning(t *testing.T, a *gateway.Pipeline, peers map[netip.Addr]string, mods ...func(*Config)) *Sync {
	t.Helper()
	sa := newSync(t, "primary", testKey, a, func(c *Config) {
		c.Interval = DefaultInterval
		for _, m := range mods {
			m(c)
		}
	})
	sa.SetPeers(peers)
	for _, l := range sa.links {
		nstest.Eventually(t, "session", syncWait, func() bool { return l.current() != nil })
	}
	return sa
}

// matchesSoon reports whether b holds exactly a's flows of the egress IPs
// within a second (the standby applying what one scan sent).
func matchesSoon(a, b *gateway.Pipeline, ips ...netip.Addr) bool {
	return nstest.Soon(time.Second, func() bool { return equal(table(a, ips...), table(b, ips...)) })
}

// TestRemadeFlowsFollowed: flows removed and made again with the same
// tuples and other bindings between two scans land in other slots of the
// table (some before their old slot, some after); one scan brings the
// standby in step: the removal of a slot's old flow never removes the
// tuple's new copy sent from another slot.
func TestRemadeFlowsFollowed(t *testing.T) {
	a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
	_, addr := standby(t, b)
	cur := make([]conntrack.Flow, 300)
	for i := range cur {
		cur[i] = flow(i, conntrack.StateEstablished)
		adopt(t, a, cur[i])
	}
	sa := scanning(t, a, peers(addr))
	sa.scan()
	if !matchesSoon(a, b, egress, egress6) {
		t.Fatal("the standby is not in step after the first (full) scan")
	}
	for round := range 3 {
		// Removed in order, made again in the same order: the shards' free
		// lists hand the slots back in the reverse order.
		for i := range cur {
			if !a.Abandon(&cur[i]) {
				t.Fatalf("round %d: flow %d not held", round, i)
			}
		}
		for i := range cur {
			cur[i].NATPort = uint16(20000 + 1000*round + i)
			adopt(t, a, cur[i])
		}
		sa.scan()
		if !matchesSoon(a, b, egress, egress6) {
			t.Fatalf("round %d: after one scan the standby holds %d flows, the primary %d (or other bindings)",
				round, len(table(b, egress, egress6)), len(table(a, egress, egress6)))
		}
	}
}

// TestRefreshesSwept: a flow's timer moved by traffic is not a change the
// table marks; the sweep finds it within sweepEvery's worth of scans and
// sends the refresh once it is due (a quarter of the timeout past what the
// standby holds), one record.
func TestRefreshesSwept(t *testing.T) {
	a, b := newPipeline(t, 1<<12, egress), newPipeline(t, 1<<12)
	_, addr := standby(t, b)
	f := flow(0, conntrack.StateEstablished)
	f.NATPort = 61000
	if err := a.Adopt(&f, path, time.Hour, clock()); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 { // other flows, so that the sweep has slots to walk
		adopt(t, a, flow(2*i+2, conntrack.StateEstablished))
	}
	sa := scanning(t, a, map[netip.Addr]string{egress: addr})
	sa.scan()
	if !matchesSoon(a, b, egress) {
		t.Fatal("the standby is not in step after the first (full) scan")
	}
	remaining := func(p *gateway.Pipeline) (rem time.Duration) {
		p.Conntrack().Range(clock(), func(g *conntrack.Flow, r time.Duration) {
			if g.Orig == f.Orig {
				rem = r
			}
		})
		return rem
	}
	if r := remaining(b); r > time.Hour+time.Second {
		t.Fatalf("the standby's copy has %v left, want at most the hour the primary had", r)
	}
	// The server's segment refreshes the flow to the full established
	// timeout (2 h 4 min): 64 minutes past the standby's copy.
	w := a.NewProcessor(1)
	if r := process(w, tcpFrame(t, server, egress, 443, 61000)); r.Verdict != gateway.VerdictTx {
		t.Fatalf("the server's segment: %v (%v), want forwarded", r.Verdict, r.Reason)
	}
	if r := remaining(a); r < 2*time.Hour {
		t.Fatalf("the primary's flow has %v left after the segment, want the established timeout", r)
	}
	sent := sa.Stats().RecordsSent
	scans := int(sweepEvery/DefaultInterval) + 1
	for i := 0; i < scans && sa.Stats().RecordsSent == sent; i++ {
		sa.scan()
	}
	nstest.Soon(time.Second, func() bool { return remaining(b) >= 2*time.Hour }) // the standby applying it
	if r := remaining(b); r < 2*time.Hour {
		t.Fatalf("after %d scans (a whole sweep) the standby's copy has %v left, want the refreshed deadline", scans, r)
	}
	if n := sa.Stats().RecordsSent - sent; n != 1 {
		t.Fatalf("the sweep sent %d records, want the one refresh", n)
	}
}

// TestPeersChange: an egress IP added to a standby's link has its flows
// sent though none of them changed; an IP taken off the link is forgotten
// without a word (its flows stay at the old standby, which may be taking
// the IP over) and its later changes are not sent, while the IP that
// stays goes on being sent.
func TestPeersChange(t *testing.T) {
	a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
	_, addr := standby(t, b)
	for i := range 100 {
		adopt(t, a, flow(i, conntrack.StateEstablished)) // even i on egress, odd on egress6
	}
	sa := scanning(t, a, map[netip.Addr]string{egress: addr})
	sa.scan()
	if !matchesSoon(a, b, egress) || len(table(b, egress6)) != 0 {
		t.Fatalf("with egress alone the standby holds %d and %d flows, want 50 and 0", len(table(b, egress)), len(table(b, egress6)))
	}
	sa.SetPeers(peers(addr))
	sa.scan()
	if !matchesSoon(a, b, egress, egress6) {
		t.Fatalf("egress6 added: the standby holds %d of its 50 flows after a scan", len(table(b, egress6)))
	}
	sa.SetPeers(map[netip.Addr]string{egress6: addr})
	sa.scan()
	sent := sa.Stats().RecordsSent
	for i := 0; i < 10; i += 2 { // flows of egress, no longer sent
		f := flow(i, conntrack.StateEstablished)
		a.Abandon(&f)
	}
	g := flow(1, conntrack.StateEstablished) // one of egress6, still sent
	a.Abandon(&g)
	sa.scan()
	if !matchesSoon(a, b, egress6) {
		t.Fatal("egress6's removal did not reach the standby")
	}
	if n := sa.Stats().RecordsSent - sent; n != 1 {
		t.Fatalf("%d records sent, want 1 (the removal of egress6's flow)", n)
	}
	if n := len(table(b, egress)); n != 50 {
		t.Fatalf("the standby holds %d flows of egress, want its 50 copies left alone", n)
	}
}

// TestFullWindowKeepsChangesPending: changes that do not fit the window
// (the standby acknowledges nothing for a while) wait, slot by slot, and
// follow once it does, without a look at every flow and without a resync.
func TestFullWindowKeepsChangesPending(t *testing.T) {
	a, b := newPipeline(t, 1<<14, egress, egress6), newPipeline(t, 1<<14)
	_, addr := standby(t, b)
	px := newProxy(t, addr)
	for i := range 100 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := scanning(t, a, peers(px.addr()), func(c *Config) { c.Window = 4 << 10 })
	l := sa.links[px.addr()]
	sa.scan() // the session's full resync: 100 flows, one batch
	if !matchesSoon(a, b, egress, egress6) || l.resync {
		t.Fatal("not in step after the resync")
	}
	px.pause()
	for i := 100; i < 3000; i++ { // ~90 KB of records: over 20 windows
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	for range 3 {
		sa.scan()
	}
	if !l.anyPending || l.full {
		t.Fatalf("with no acknowledgement the changes did not wait (pending %v) or a look at every flow is due (%v)", l.anyPending, l.full)
	}
	px.unpause()
	// Each scan sends what the acknowledgements that came in since allow.
	i := 0
	nstest.Eventually(t, "the standby in step", syncWait, func() bool {
		if equal(table(a, egress, egress6), table(b, egress, egress6)) {
			return true
		}
		if i > 30 { // a window's worth a scan: a few; the sweep alone would need 50
			t.Fatalf("the standby holds %d of the primary's %d flows after %d scans", len(table(b, egress, egress6)), len(table(a, egress, egress6)), i)
		}
		sa.scan()
		if l.full {
			t.Fatalf("scan %d: a full window made the next scan look at every flow", i)
		}
		i++
		return false
	})
	if st := sa.Stats(); st.FullResyncs != 1 || st.Stalls != 0 || st.RecordsSent != 3000 {
		t.Fatalf("stats %+v: want the 2900 new flows sent once each after the 100 of the resync, no second resync, no stall", st)
	}
}

// TestResyncGoesOnWhereItStopped: a full resync larger than the window
// goes on, scan after scan, from the slot where the window stopped it: the
// scans look at each flow about once, not at the whole table each time.
func TestResyncGoesOnWhereItStopped(t *testing.T) {
	const flows = 20000 // ~620 KB of records: about ten batches
	a, b := newPipeline(t, 1<<15, egress, egress6), newPipeline(t, 1<<15)
	_, addr := standby(t, b)
	for i := range flows {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := scanning(t, a, peers(addr), func(c *Config) { c.Window = 16 << 10 })
	l := sa.links[addr]
	// Each scan sends what the acknowledgements that came in since allow.
	scans := 0
	nstest.Eventually(t, "the resync's end", syncWait, func() bool {
		if !l.resync && scans > 0 {
			return true
		}
		if scans++; scans > 500 {
			t.Fatal("the resync never ended")
		}
		sa.scan()
		return false
	})
	if !matchesSoon(a, b, egress, egress6) {
		t.Fatal("not in step after the resync")
	}
	slots := a.Conntrack().Slots()
	share := sweepShare(slots, DefaultInterval)
	st := sa.Stats()
	if limit := uint64(flows + scans*(share+2)); scans < 3 || st.SlotsLooked > limit {
		t.Fatalf("the resync took %d scans and looked at %d slots; want several scans and at most %d (each flow about once, the sweep's shares, the slot each scan stopped at)", scans, st.SlotsLooked, limit)
	}
	t.Logf("resync of %d flows in %d scans, %d slots looked at", flows, scans, st.SlotsLooked)
}
