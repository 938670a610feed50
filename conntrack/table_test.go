package conntrack

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

func addr(s string) Addr { return Addr(netip.MustParseAddr(s).As16()) }

// flowN returns a distinct IPv4 TCP flow for every i: pod 10.x.y.z:port →
// server 192.0.2.1:443, NATed to 198.51.100.1:port.
var (
	podBase    = addr("10.0.0.0")
	serverAddr = addr("192.0.2.1")
	natBase    = addr("198.51.100.1")
)

func flowN(i uint32, proto uint8) Flow {
	var f Flow
	f.Orig.Src = podBase
	f.Orig.Src[13], f.Orig.Src[14], f.Orig.Src[15] = byte(i>>24), byte(i>>16), byte(i>>8)
	f.Orig.Dst = serverAddr
	f.Orig.SrcPort = uint16(i) | 1<<15
	f.Orig.DstPort = 443
	f.Orig.Proto = proto
	f.NATAddr = natBase
	f.NATAddr[14], f.NATAddr[15] = byte(i>>16), byte(i>>8)
	f.NATPort = uint16(i) | 1<<15
	f.Aux = i * 3
	return f
}

func mustNew(t testing.TB, cfg Config) *Table {
	t.Helper()
	tb, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestInsertTrackDelete(t *testing.T) {
	tb := mustNew(t, Config{MaxFlows: 1000})
	f := flowN(7, ProtoTCP)
	if err := tb.Insert(&f, FlagSYN, 0); err != nil {
		t.Fatal(err)
	}
	if f.State != StateSynSent {
		t.Fatalf("state %v, want SYN_SENT", f.State)
	}
	var out Flow
	if !tb.Track(Original, &f.Orig, FlagSYN, 1, &out) || out.Orig != f.Orig || out.Aux != f.Aux || out.NATPort != f.NATPort {
		t.Fatalf("original lookup: %+v", out)
	}
	r := f.Reply()
	if !tb.Track(Reply, &r, FlagSYN|FlagACK, 2, &out) || out.State != StateSynRecv {
		t.Fatalf("reply lookup: %+v", out)
	}
	if tb.Track(Original, &r, 0, 2, &out) {
		t.Fatal("reply tuple matched as an original tuple")
	}
	if !tb.ReplyInUse(&r) {
		t.Fatal("ReplyInUse false for a tracked reply tuple")
	}
	if err := tb.Insert(&f, FlagSYN, 3); !errors.Is(err, ErrExists) {
		t.Fatalf("second insert: %v", err)
	}
	if tb.Len() != 1 {
		t.Fatalf("Len %d", tb.Len())
	}
	if !tb.Delete(&f.Orig, &out) || out.Orig != f.Orig {
		t.Fatal("delete failed")
	}
	if tb.Len() != 0 || tb.Track(Reply, &r, 0, 4, &out) || tb.ReplyInUse(&r) {
		t.Fatal("flow still there after delete")
	}
	_ = time.Second
}
