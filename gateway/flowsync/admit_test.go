package flowsync

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/internal/nstest"
)

// dialAs opens a session to addr from the source address src, naming
// itself peer.
func dialAs(t *testing.T, addr, src, peer string) (*session, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return clientHandshake(c, testKey, peer, syncVersions)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestForgedRecordsRefused: a key holder sends records the cluster does
// not back: a flood for 2,000 egress IPs this node stands by for none of,
// records of a stood-by IP from a peer that is not its host, a return path
// to no node's VTEP, a pod source outside the VTEP's node. Each is refused
// and counted by reason, nothing is held, and the flood leaves no NAT
// state (it grew the heap by 516 MiB, a port table per address, before).
func TestForgedRecordsRefused(t *testing.T) {
	b := newPipeline(t, 1<<14)
	adm := testAdmission()
	adm.Nodes["gw2"] = AdmitNode{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	sb := newSync(t, "standby", testKey, b, func(c *Config) { c.Admission = func() *Admission { return adm } })
	if err := sb.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := sb.Addr().String()

	heap0 := heapInUse()
	s, err := dialAs(t, addr, "127.0.0.1", "primary")
	if err != nil {
		t.Fatal(err)
	}
	var items []byte
	seq := uint64(0)
	flush := func(s *session) {
		seq += 10
		send(t, s, msgBatch, seq, items)
		if typ, got := recvAck(t, s); typ != msgAck || got != seq {
			t.Fatalf("ack %d/%d, want %d/%d", typ, got, msgAck, seq)
		}
		items = items[:0]
	}
	items = appendPath(items, 1, path)
	const flood = 2000
	for i := range flood {
		f := flow(0, conntrack.StateEstablished)
		f.Aux = 1
		f.Orig.SrcPort = uint16(1000 + i)
		f.NATAddr = netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}).As16()
		items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
		if len(items) > 50<<10 {
			flush(s)
		}
	}
	// A return path to a VTEP no node has, and a pod of another node.
	items = appendPath(items, 2, path)
	items[len(items)-pathLen+4+3] = 77 // 10.0.0.77
	f := flow(0, conntrack.StateEstablished)
	f.Aux = 2
	items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
	f = flow(2, conntrack.StateEstablished)
	f.Aux = 1
	f.Orig.Src = netip.MustParseAddr("10.244.9.9").As16()
	items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
	flush(s)

	// gw2 holds the key and connects from its own address, but egress is
	// primary's: its records and deletes of it are refused.
	s2, err := dialAs(t, addr, "127.0.0.1", "gw2")
	if err != nil {
		t.Fatal(err)
	}
	items = appendPath(items, 1, path)
	f = flow(4, conntrack.StateEstablished)
	f.Aux = 1
	items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
	items = conntrack.AppendRecord(append(items, itemDelete), &f, 0)
	seq = 0
	flush(s2)

	st := sb.Stats()
	for r, want := range map[Refusal]uint64{RefusedUnknownIP: flood, RefusedUnknownVTEP: 1, RefusedPodOutsideNode: 1, RefusedWrongPeer: 2} {
		if got := st.RecordsRefused[r]; got != want {
			t.Errorf("refused %s: %d, want %d", r, got, want)
		}
	}
	if st.RecordsApplied != 0 || st.BackupFlows != 0 || b.Conntrack().Len() != 0 {
		t.Errorf("forged records held: applied %d, backup %d, flows %d", st.RecordsApplied, st.BackupFlows, b.Conntrack().Len())
	}
	if grew := int64(heapInUse()) - int64(heap0); grew > 32<<20 {
		t.Errorf("the flood grew the heap by %d MiB", grew>>20)
	}
}

// TestPeerBoundToItsAddress: a key holder naming itself primary from
// another address than primary's is refused before any record.
func TestPeerBoundToItsAddress(t *testing.T) {
	sb, addr := standby(t, newPipeline(t, 1<<10))
	s, err := dialAs(t, addr, "127.0.0.2", "primary")
	if err != nil {
		t.Fatal(err)
	}
	s.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	send(t, s, msgBatch, 10, []byte{itemBegin})
	if _, err := s.read(nil); err == nil {
		t.Fatal("a session from another address than the peer's node got an answer")
	}
	if got := sb.Stats().RecordsRefused[RefusedPeerAddress]; got != 1 {
		t.Errorf("refused peer_address: %d, want 1", got)
	}
}

// TestPeerFlowCap: the flows held for one peer stop at MaxPeerFlows; the
// rest are refused and counted.
func TestPeerFlowCap(t *testing.T) {
	b := newPipeline(t, 1<<12)
	sb := newSync(t, "standby", testKey, b, func(c *Config) { c.MaxPeerFlows = 10 })
	if err := sb.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	s, err := dialAs(t, sb.Addr().String(), "127.0.0.1", "primary")
	if err != nil {
		t.Fatal(err)
	}
	items := appendPath(nil, 0, path)
	for i := range 50 {
		f := flow(2*i, conntrack.StateEstablished)
		items = conntrack.AppendRecord(append(items, itemUpsert), &f, time.Hour)
	}
	send(t, s, msgBatch, 10, items)
	recvAck(t, s)
	if st := sb.Stats(); st.BackupFlows != 10 || st.RecordsRefused[RefusedPeerFull] != 40 {
		t.Errorf("held %d flows, refused %d as peer_full; want 10 and 40", st.BackupFlows, st.RecordsRefused[RefusedPeerFull])
	}
}

// TestSyncListenerHostile: a host without the key keeps 150 connections
// open to the sync port from one address, opening a new one whenever one
// is closed; the primary still gets its session and the standby matches
// it. Before, 64 such connections took every slot.
func TestSyncListenerHostile(t *testing.T) {
	a := newPipeline(t, 1<<10, egress, egress6)
	b := newPipeline(t, 1<<10)
	sb, addr := standby(t, b)
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		conns := make([]net.Conn, 150)
		defer func() {
			for _, c := range conns {
				if c != nil {
					c.Close()
				}
			}
		}()
		closed := make(chan int, len(conns))
		// Every 10 ms, reopen each connection the standby closed.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			for i, c := range conns {
				if c != nil {
					continue
				}
				if c, err := d.Dial("tcp", addr); err == nil {
					conns[i] = c
					go func() { io.Copy(io.Discard, c); closed <- i }()
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for more := true; more; {
				select {
				case i := <-closed:
					conns[i].Close()
					conns[i] = nil
				default:
					more = false
				}
			}
		}
	}()
	// The attack is on: the listener has refused what it will not hold.
	nstest.Eventually(t, "attack refused", syncWait, func() bool { return sb.Stats().Refused >= 100 })
	for i := range 4 {
		f := flow(i, conntrack.StateEstablished)
		adopt(t, a, f)
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(peers(addr))
	sa.Start()
	waitMatch(t, a, b)
}

// TestStandbyViewLate: the primary acts on a status this node's agent has
// not read yet (it is the new standby): the first records are refused as
// unknown_ip; once the view here backs the IP the session is ended, the
// primary resends everything, and the standby matches it. Before, the
// refused records were lost until each flow changed again (the lab's
// continuity tests lost up to 62 of 100 connections' backups so).
func TestStandbyViewLate(t *testing.T) {
	a, b := newPipeline(t, 1<<14, egress, egress6), newPipeline(t, 1<<14)
	var adm atomic.Pointer[Admission]
	adm.Store(NewAdmission(map[netip.Addr]string{}, testAdmission().Nodes))
	sb := newSync(t, "standby", testKey, b, func(c *Config) { c.Admission = adm.Load })
	if err := sb.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(peers(sb.Addr().String()))
	sa.Start()
	nstest.Eventually(t, "the first records refused", syncWait, func() bool {
		return sb.Stats().RecordsRefused[RefusedUnknownIP] >= 100
	})
	if n := len(table(b, egress, egress6)); n != 0 {
		t.Fatalf("the standby holds %d flows the cluster did not back", n)
	}
	adm.Store(testAdmission())
	waitMatch(t, a, b)
	if st := sb.Stats(); st.LateResyncs == 0 {
		t.Errorf("stats %+v: the standby matched without a late resync", st)
	}
}
