package conntrack

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func exportFlows() []Flow {
	var fs []Flow
	tcp := flowN(1, ProtoTCP)
	tcp.State = StateEstablished
	udp := flowN(2, ProtoUDP)
	udp.State = StateUDPReplied
	icmp6 := Flow{
		Orig:    Tuple{Src: addr("fd00::1"), Dst: addr("2001:db8::5"), SrcPort: 77, Proto: ProtoICMPv6},
		NATAddr: addr("2001:db8:1::9"), NATPort: 1077, Aux: 1 << 31, State: StateICMPUnreplied,
	}
	mixed := Flow{ // NAT64-like mix: not all IPv4, so the long form
		Orig:    Tuple{Src: addr("10.1.2.3"), Dst: addr("64:ff9b::c000:201"), SrcPort: 1, DstPort: 2, Proto: 132},
		NATAddr: addr("198.51.100.7"), NATPort: 3, State: StateGeneric,
	}
	return append(fs, tcp, udp, icmp6, mixed)
}

func TestRecordRoundTrip(t *testing.T) {
	for _, f := range exportFlows() {
		b := AppendRecord(nil, &f, 90*time.Second)
		want := RecordLenIPv6
		if isV4(&f.Orig.Src) && isV4(&f.Orig.Dst) && isV4(&f.NATAddr) {
			want = RecordLenIPv4
		}
		if len(b) != want {
			t.Fatalf("record %d bytes, want %d", len(b), want)
		}
		g, rem, n, err := DecodeRecord(append(b, 0xAA)) // trailing bytes are not read
		if err != nil || n != len(b) || g != f || rem != 90*time.Second {
			t.Fatalf("round trip: %+v %v %d %v, want %+v", g, rem, n, err, f)
		}
		for cut := 0; cut < len(b); cut++ {
			if _, _, _, err := DecodeRecord(b[:cut]); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("record cut to %d bytes: %v", cut, err)
			}
		}
	}
}

func TestRecordRejectsMalformed(t *testing.T) {
	f := flowN(1, ProtoTCP)
	f.State = StateEstablished
	good := AppendRecord(nil, &f, time.Minute)
	for name, mut := range map[string]func(b []byte){
		"version 1 (8-byte Aux)": func(b []byte) { b[0] = 1 },
		"version 3":              func(b []byte) { b[0] = 3 },
		"flags":                  func(b []byte) { b[1] = 0x80 },
		"state none":             func(b []byte) { b[3] = 0 },
		"state range":            func(b []byte) { b[3] = 250 },
		"UDP state TCP":          func(b []byte) { b[2] = ProtoUDP },
	} {
		b := append([]byte(nil), good...)
		mut(b)
		if _, _, _, err := DecodeRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Export from one gateway, Import into a standby: same flows, states and
// NAT bindings, remaining lifetimes carried over and never extended past
// the state's timeout.
func TestExportImportRoundTrip(t *testing.T) {
	src := mustNew(t, Config{MaxFlows: 5000, Shards: 4})
	const n = 3000
	now := int64(50 * time.Hour)
	for i := uint32(0); i < n; i++ {
		f := flowN(i, []uint8{ProtoTCP, ProtoUDP, ProtoICMP}[i%3])
		if err := src.Insert(&f, FlagSYN, now-int64(i)*int64(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range exportFlows() {
		if err := src.ImportFlow(&f, time.Hour, now); err != nil { // clamped to the state's timeout
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	cnt, err := src.Export(&buf, now)
	if err != nil || cnt != src.Len() {
		t.Fatalf("export: %d %v, Len %d", cnt, err, src.Len())
	}
	later := now + int64(time.Hour) // the standby's clock differs
	dst := mustNew(t, Config{MaxFlows: 5000})
	got, err := dst.Import(bytes.NewReader(buf.Bytes()), later)
	if err != nil || got != cnt || dst.Len() != cnt {
		t.Fatalf("import: %d %v, Len %d, want %d", got, err, dst.Len(), cnt)
	}
	var a, b Flow
	for i := uint32(0); i < n; i++ {
		f := flowN(i, []uint8{ProtoTCP, ProtoUDP, ProtoICMP}[i%3])
		r := f.Reply()
		if !src.Track(Reply, &r, 0, now, &a) || !dst.Track(Reply, &r, 0, later, &b) || a != b {
			t.Fatalf("flow %d differs: %+v vs %+v", i, a, b)
		}
	}
	// Remaining lifetimes: the ICMP flows (60 s) expire 60 s after import,
	// not earlier; the TCP SYN_SENT ones (4 min) outlive them.
	if k := dst.Expire(later+int64(59*time.Second), 1<<20, nil); k != 0 {
		t.Fatalf("%d flows expired before their remaining lifetime", k)
	}
	icmp := 0
	for dst.Expire(later+int64(61*time.Second), 1<<20, func(f *Flow) {
		if f.Orig.Proto == ProtoICMP || f.Orig.Proto == ProtoICMPv6 {
			icmp++
		} else {
			t.Fatalf("flow %+v expired too early", f)
		}
	}) > 0 {
	}
	if icmp != n/3+1 {
		t.Fatalf("%d ICMP flows expired, want %d", icmp, n/3+1)
	}
	// Importing again adds nothing: duplicates are skipped.
	if got, err := dst.Import(bytes.NewReader(buf.Bytes()), later); err != nil || got != n/3+1 {
		t.Fatalf("re-import added %d (%v), want only the %d expired ones", got, err, n/3+1)
	}
}

func TestImportMalformedStreams(t *testing.T) {
	f := flowN(1, ProtoUDP)
	f.State = StateUDPReplied
	good := append([]byte("EGCT"), AppendRecord(nil, &f, time.Minute)...)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XGCT"), good[4:]...),
		"truncated": good[:len(good)-1],
		"short hdr": append(append([]byte(nil), good...), 1),
		"bad ver":   append(append([]byte(nil), good...), 9, 0),
	} {
		tb := mustNew(t, Config{MaxFlows: 8})
		if _, err := tb.Import(bytes.NewReader(b), 0); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	full := mustNew(t, Config{MaxFlows: 1})
	g := flowN(2, ProtoUDP)
	g.State = StateUDPReplied
	two := AppendRecord(append([]byte(nil), good...), &g, time.Minute)
	if n, err := full.Import(bytes.NewReader(two), 0); n != 1 || !errors.Is(err, ErrFull) {
		t.Fatalf("import into a full table: %d %v", n, err)
	}
}

// FuzzImport: any byte stream is imported or refused with an error, never a
// panic, and the table stays consistent.
func FuzzImport(f *testing.F) {
	var seed []byte
	seed = append(seed, "EGCT"...)
	for _, fl := range exportFlows() {
		seed = AppendRecord(seed, &fl, time.Minute)
	}
	f.Add(seed)
	f.Add([]byte("EGCT"))
	f.Add([]byte("EGCT\x01\x01"))
	f.Add(seed[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := New(Config{MaxFlows: 16})
		if err != nil {
			t.Fatal(err)
		}
		n, err := tb.Import(bytes.NewReader(b), 1000)
		if n != tb.Len() {
			t.Fatalf("Import reported %d, table holds %d (err %v)", n, tb.Len(), err)
		}
		var out Flow
		var buf bytes.Buffer
		if _, err := tb.Export(&buf, 1000); err != nil {
			t.Fatal(err)
		}
		rec := buf.Bytes()[4:]
		for len(rec) > 0 {
			fl, _, k, err := DecodeRecord(rec)
			if err != nil {
				t.Fatalf("re-export unreadable: %v", err)
			}
			rec = rec[k:]
			r := fl.Reply()
			if !tb.Track(Original, &fl.Orig, 0, 1000, &out) || !tb.ReplyInUse(&r) {
				t.Fatal("imported flow unreachable")
			}
		}
	})
}

// FuzzDecodeRecord: malformed records are errors, never panics; good ones
// re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, fl := range exportFlows() {
		f.Add(AppendRecord(nil, &fl, time.Second))
	}
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, rem, n, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error not ErrBadRecord: %v", err)
			}
			return
		}
		again := AppendRecord(nil, &fl, rem)
		if !bytes.Equal(again, b[:n]) {
			// Only an IPv6-form record of all-IPv4 addresses re-encodes shorter.
			if b[1] != 0 || len(again) != RecordLenIPv4 {
				t.Fatalf("re-encode differs:\n%x\n%x", b[:n], again)
			}
		}
	})
}
