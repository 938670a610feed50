package natlog

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
)

// decoded is one data record as a collector decodes it with the templates
// it was sent.
type decoded map[uint16][]byte

// collect decodes IPFIX messages per RFC 7011: the templates first, then
// the data sets by them. It knows nothing of the exporter but the RFC.
func collect(t *testing.T, c *net.UDPConn, want int) []decoded {
	t.Helper()
	tmpl := map[uint16][]field{}
	var out []decoded
	buf := make([]byte, 65536)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var seq uint32
	for len(out) < want {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d records: %v", len(out), err)
		}
		m := buf[:n]
		if v := binary.BigEndian.Uint16(m); v != 10 {
			t.Fatalf("version %d", v)
		}
		if l := binary.BigEndian.Uint16(m[2:]); int(l) != n {
			t.Fatalf("message length %d, datagram %d", l, n)
		}
		if s := binary.BigEndian.Uint32(m[8:]); s != seq {
			t.Fatalf("sequence %d, want %d", s, seq)
		}
		for b := m[16:]; len(b) > 0; {
			id, l := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
			set := b[4:l]
			b = b[l:]
			if id == 2 {
				for len(set) > 0 {
					tid, cnt := binary.BigEndian.Uint16(set), int(binary.BigEndian.Uint16(set[2:]))
					set = set[4:]
					var fs []field
					for range cnt {
						fs = append(fs, field{binary.BigEndian.Uint16(set), binary.BigEndian.Uint16(set[2:])})
						set = set[4:]
					}
					tmpl[tid] = fs
				}
				continue
			}
			fs, ok := tmpl[id]
			if !ok {
				t.Fatalf("data set %d before its template", id)
			}
			for len(set) > 0 {
				d := decoded{}
				for _, f := range fs {
					d[f.id], set = append([]byte(nil), set[:f.len]...), set[f.len:]
				}
				out = append(out, d)
				seq++
			}
		}
	}
	return out
}

func TestIPFIXNATEvents(t *testing.T) {
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l, c := newTestLog(t, Config{IPFIX: ln.LocalAddr().String(), Gateway: "gw-a"})
	w := l.NewRing()
	f4 := flow("10.0.0.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	f6 := flow("[fd00::5]:5353", "[2001:db8::101]:6000", "[2001:db8:1::7]:53", conntrack.ProtoUDP)
	w.Push(&Record{Mono: c.mono, Flow: f4, Event: EventCreate})
	w.Push(&Record{Mono: c.mono, Flow: f6, Event: EventAdopt})
	// Enough records to need several datagrams.
	for range 60 {
		w.Push(&Record{Mono: c.mono, Flow: f4, Event: EventEnd})
	}
	l.Flush()
	got := collect(t, ln, 62)
	ms := uint64(c.wall.UnixMilli())
	u16 := binary.BigEndian.Uint16
	ip := func(b []byte) netip.Addr { a, _ := netip.AddrFromSlice(b); return a }

	d := got[0]
	if binary.BigEndian.Uint64(d[ieObservationTimeMillis]) != ms || d[ieNATEvent][0] != natEventSessionCreate || d[ieProtocolIdentifier][0] != 6 ||
		ip(d[ieSourceIPv4Address]).String() != "10.0.0.5" || ip(d[iePostNATSourceIPv4]).String() != "192.0.2.101" ||
		u16(d[ieSourceTransportPort]) != 40000 || u16(d[iePostNAPTSourcePort]) != 40123 ||
		ip(d[ieDestinationIPv4Address]).String() != "198.51.100.7" || u16(d[ieDestinationTransport]) != 443 ||
		ip(d[iePostNATDestinationIPv4]).String() != "198.51.100.7" || u16(d[iePostNAPTDestPort]) != 443 {
		t.Fatalf("IPv4 create: %v", d)
	}
	d = got[1]
	if d[ieNATEvent][0] != natEventSessionCreate || d[ieProtocolIdentifier][0] != 17 ||
		ip(d[ieSourceIPv6Address]).String() != "fd00::5" || ip(d[iePostNATSourceIPv6]).String() != "2001:db8::101" ||
		u16(d[iePostNAPTSourcePort]) != 6000 || ip(d[ieDestinationIPv6Address]).String() != "2001:db8:1::7" {
		t.Fatalf("IPv6 adopt: %v", d)
	}
	if got[61][ieNATEvent][0] != natEventSessionDelete {
		t.Fatalf("end: %v", got[61])
	}
	if s := l.Stats(); s.Written != 62 || s.Dropped != 0 {
		t.Fatalf("%+v", s)
	}
}
