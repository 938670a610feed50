package natlog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
)

func flow(pod, egress, dst string, proto uint8) conntrack.Flow {
	p, e, d := netip.MustParseAddrPort(pod), netip.MustParseAddrPort(egress), netip.MustParseAddrPort(dst)
	return conntrack.Flow{
		Orig:    conntrack.Tuple{Src: p.Addr().As16(), Dst: d.Addr().As16(), SrcPort: p.Port(), DstPort: d.Port(), Proto: proto},
		NATAddr: e.Addr().As16(), NATPort: e.Port(),
	}
}

// clock is a test clock: mono and wall move together.
type clock struct {
	mono int64
	wall time.Time
}

func (c *clock) Mono() int64    { return c.mono }
func (c *clock) Now() time.Time { return c.wall }
func (c *clock) step(d time.Duration) {
	c.mono += int64(d)
	c.wall = c.wall.Add(d)
}

func newClock() *clock {
	return &clock{mono: 1e9, wall: time.Date(2026, 12, 4, 14, 2, 7, 0, time.UTC)}
}

func TestRingFullDropsAndCounts(t *testing.T) {
	q := newRing(4)
	f := flow("10.0.0.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	for i := range 6 {
		r := Record{Mono: int64(i), Flow: f, Event: EventCreate}
		if got, want := q.Push(&r), i < 4; got != want {
			t.Fatalf("push %d: %v, want %v", i, got, want)
		}
	}
	if q.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", q.Dropped())
	}
	var seen []int64
	q.drain(func(r *Record) { seen = append(seen, r.Mono) })
	if !slices.Equal(seen, []int64{0, 1, 2, 3}) {
		t.Fatalf("drained %v", seen)
	}
	r := Record{Mono: 9}
	if !q.Push(&r) {
		t.Fatal("a drained ring is still full")
	}
}

// TestRingConcurrent: one producer, one consumer, every record arrives once
// and in order (run with -race).
func TestRingConcurrent(t *testing.T) {
	q := newRing(64)
	const n = 100000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(0); i < n; {
			r := Record{Mono: i}
			if q.Push(&r) {
				i++
			}
		}
	}()
	next := int64(0)
	for next < n {
		q.drain(func(r *Record) {
			if r.Mono != next {
				t.Fatalf("got %d, want %d", r.Mono, next)
			}
			next++
		})
	}
	<-done
}

func newTestLog(t *testing.T, cfg Config) (*Log, *clock) {
	t.Helper()
	c := newClock()
	cfg.Clock, cfg.Now = c.Mono, c.Now
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l, c
}

func TestJSONLineAndQuery(t *testing.T) {
	dir := t.TempDir()
	l, c := newTestLog(t, Config{Dir: dir, Gateway: "gw-a"})
	l.SetPods(NewPods(map[netip.Addr]Pod{netip.MustParseAddr("10.0.0.5"): {Namespace: "shop", Name: "web-1", UID: "u-1"}}))
	w := l.NewRing()
	f := flow("10.0.0.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	start := c.wall
	w.Push(&Record{Mono: c.mono, Flow: f, Event: EventCreate})
	c.step(3 * time.Second)
	l.Flush() // written 3 s after the event: the record keeps the event's time
	c.step(time.Minute)
	w.Push(&Record{Mono: c.mono, Flow: f, Event: EventEnd})
	end := c.wall
	l.Flush()

	b, err := os.ReadFile(filepath.Join(dir, currentName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), b)
	}
	want := Entry{Event: "create", Time: start, Protocol: "tcp", Namespace: "shop", Pod: "web-1", PodUID: "u-1",
		PodIP: "10.0.0.5", PodPort: 40000, EgressIP: "192.0.2.101", EgressPort: 40123, DstIP: "198.51.100.7", DstPort: 443, Gateway: "gw-a"}
	wb, _ := json.Marshal(want)
	if got := strings.TrimSuffix(lines[0], "\n"); got != string(wb) {
		t.Fatalf("line\n%s\nwant (json.Marshal)\n%s", got, wb)
	}
	es, bad, err := Entries(dir)
	if err != nil || bad != 0 {
		t.Fatal(err, bad)
	}
	q := Question{IP: netip.MustParseAddr("192.0.2.101"), Port: 40123, Protocol: "tcp"}
	for _, tc := range []struct {
		at   time.Time
		want int
	}{{start.Add(-time.Millisecond), 0}, {start, 1}, {start.Add(30 * time.Second), 1}, {end, 1}, {end.Add(time.Millisecond), 0}} {
		q.At = tc.at
		got := Query(es, q)
		if len(got) != tc.want {
			t.Fatalf("at %v: %v, want %d bindings", tc.at, got, tc.want)
		}
		if len(got) == 1 && (got[0].Pod != "web-1" || got[0].Namespace != "shop" || got[0].Destination != "198.51.100.7:443" || !got[0].End.Equal(end)) {
			t.Fatalf("at %v: %v", tc.at, got[0])
		}
	}
	q.Protocol = "udp"
	q.At = start
	if got := Query(es, q); len(got) != 0 {
		t.Fatalf("udp: %v", got)
	}
	// -o json's shape: exactly these keys.
	q.Protocol = ""
	jb, _ := json.Marshal(Query(es, q))
	var shape []map[string]any
	if err := json.Unmarshal(jb, &shape); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range shape[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if w := []string{"destination", "end", "gateway", "namespace", "pod", "podIP", "podPort", "protocol", "start"}; !slices.Equal(keys, w) {
		t.Fatalf("keys %v, want %v", keys, w)
	}
}

// TestLineIsMarshal: every line is what json.Marshal of its Entry gives,
// for random times (the second's text is cached, the fraction trimmed),
// both families, every event and protocol, named and unnamed pods, and
// names that encoding/json escapes.
func TestLineIsMarshal(t *testing.T) {
	l, _ := newTestLog(t, Config{Dir: t.TempDir(), Gateway: "gw<&>"})
	rng := rand.New(rand.NewPCG(1, 2))
	pods := map[netip.Addr]Pod{
		netip.MustParseAddr("10.0.0.5"): {Namespace: "shop", Name: "web-1", UID: "u-1"},
		netip.MustParseAddr("fd00::5"):  {Namespace: "a&b", Name: "<x>"},
		netip.MustParseAddr("10.0.0.6"): {Namespace: "shop"}, // no name: not a pod
		netip.MustParseAddr("10.0.0.7"): {Namespace: "q", Name: `"q\`, UID: "é"},
	}
	tab := NewPods(pods)
	srcs := []string{"10.0.0.5", "fd00::5", "10.0.0.6", "10.0.0.7", "10.0.0.9"}
	at := time.Date(2026, 12, 4, 23, 59, 58, 0, time.UTC)
	protos := []uint8{conntrack.ProtoTCP, conntrack.ProtoUDP, conntrack.ProtoICMP, conntrack.ProtoICMPv6}
	for i := range 5000 {
		switch rng.IntN(4) {
		case 0: // same second
			at = at.Add(time.Duration(rng.IntN(1000)))
		case 1: // a whole second
			at = at.Truncate(time.Second).Add(time.Second)
		case 2: // trailing zeros in the fraction
			at = at.Truncate(time.Second).Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		default:
			at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
		src := netip.MustParseAddr(srcs[rng.IntN(len(srcs))])
		dst, nat := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("192.0.2.101")
		if src.Is6() {
			dst, nat = netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8:1::101")
		}
		f := flow(netip.AddrPortFrom(src, uint16(rng.Uint32())).String(), netip.AddrPortFrom(nat, uint16(rng.Uint32())).String(),
			netip.AddrPortFrom(dst, uint16(rng.Uint32())).String(), protos[rng.IntN(len(protos))])
		rec := Record{Flow: f, Event: Event(1 + rng.IntN(3))}
		got := string(l.appendJSON(nil, &rec, at, tab.lookup16(f.Orig.Src)))
		p := tab.Lookup(src)
		e := Entry{Event: rec.Event.String(), Time: at, Protocol: protoName(f.Orig.Proto), Namespace: p.Namespace, Pod: p.Name, PodUID: p.UID,
			PodIP: src.String(), PodPort: f.Orig.SrcPort, EgressIP: nat.String(), EgressPort: f.NATPort, DstIP: dst.String(), DstPort: f.Orig.DstPort, Gateway: "gw<&>"}
		want, _ := json.Marshal(e)
		if got != string(want)+"\n" {
			t.Fatalf("record %d at %v:\n%s\nwant (json.Marshal)\n%s", i, at, got, want)
		}
	}
}

// TestAdoptSurvivesOwner: the owner's create stays open (it was killed);
// the standby's adoption answers too, and a repeated adoption (a sync
// update) does not make a second binding.
func TestAdoptSurvivesOwner(t *testing.T) {
	at := time.Date(2026, 12, 4, 14, 2, 7, 0, time.UTC)
	e := func(ev, gw string, d time.Duration) Entry {
		return Entry{Event: ev, Time: at.Add(d), Protocol: "tcp", Pod: "web-1", PodIP: "10.0.0.5", PodPort: 1,
			EgressIP: "192.0.2.101", EgressPort: 2, DstIP: "198.51.100.7", DstPort: 3, Gateway: gw}
	}
	es := []Entry{e("create", "gw-a", 0), e("adopt", "gw-b", time.Second), e("adopt", "gw-b", 2*time.Second)}
	got := Query(es, Question{IP: netip.MustParseAddr("192.0.2.101"), Port: 2, At: at.Add(time.Hour)})
	if len(got) != 2 || got[0].Gateway != "gw-a" || got[1].Gateway != "gw-b" || !got[1].Start.Equal(at.Add(time.Second)) {
		t.Fatalf("%v", got)
	}
}

func TestBadLinesCounted(t *testing.T) {
	in := "{\"event\":\"create\",\"time\":\"2026-12-04T14:02:07Z\",\"protocol\":\"tcp\",\"podIP\":\"10.0.0.5\",\"podPort\":1,\"egressIP\":\"192.0.2.1\",\"egressPort\":2,\"dstIP\":\"x\",\"dstPort\":3,\"gateway\":\"g\"}\n{\"event\":\"cre\n\n{\"event\":\"bogus\"}\n"
	es, bad, err := readEntries(strings.NewReader(in))
	if err != nil || len(es) != 1 || bad != 2 {
		t.Fatalf("%d entries, %d bad, %v", len(es), bad, err)
	}
	if b := bindings(es); len(b) != 1 || b[0].Destination != "x:3" {
		t.Fatalf("%v", b)
	}
}

func TestRotationBoundsSizeAndCount(t *testing.T) {
	dir := t.TempDir()
	l, c := newTestLog(t, Config{Dir: dir, Gateway: "gw-a", MaxBytes: 1000, MaxFiles: 3})
	w := l.NewRing()
	f := flow("10.0.0.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	for i := range 100 {
		w.Push(&Record{Mono: c.mono, Flow: f, Event: EventCreate})
		c.step(time.Millisecond)
		if i%7 == 0 {
			l.Flush()
		}
	}
	l.Flush()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 3 {
		t.Fatalf("%d files, want 3", len(ents))
	}
	var lines int
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(b) > 1000 {
			t.Errorf("%s: %d bytes > 1000", e.Name(), len(b))
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	// The newest lines are the ones kept: the last is the 100th record.
	es, _, _ := Entries(dir)
	slices.SortFunc(es, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	if last := es[len(es)-1].Time; !last.Equal(c.wall.Add(-time.Millisecond)) {
		t.Fatalf("newest record %v, want %v", last, c.wall.Add(-time.Millisecond))
	}
	if lines == 100 || lines == 0 {
		t.Fatalf("%d lines kept: rotation removed nothing", lines)
	}
	// Age: rotated files older than MaxAge go at the next rotation.
	l.files.maxAge = time.Hour
	old := c.wall.Add(-2 * time.Hour)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), rotatedPre) {
			os.Chtimes(filepath.Join(dir, e.Name()), old, old)
		}
	}
	if err := l.files.prune(); err != nil {
		t.Fatal(err)
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != currentName {
		t.Fatalf("after age pruning: %v", ents)
	}
}
