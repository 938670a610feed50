package natlog

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/egret-gw/egret/conntrack"
)

// IPFIX (RFC 7011) NAT events as RFC 8158 defines them: one template per
// family, one data record per log record.

// Information elements (IANA IPFIX registry) of the templates.
const (
	ieProtocolIdentifier     = 4
	ieSourceTransportPort    = 7
	ieSourceIPv4Address      = 8
	ieDestinationTransport   = 11
	ieDestinationIPv4Address = 12
	ieSourceIPv6Address      = 27
	ieDestinationIPv6Address = 28
	iePostNATSourceIPv4      = 225
	iePostNATDestinationIPv4 = 226
	iePostNAPTSourcePort     = 227
	iePostNAPTDestPort       = 228
	ieNATEvent               = 230
	iePostNATSourceIPv6      = 281
	iePostNATDestinationIPv6 = 282
	ieObservationTimeMillis  = 323
)

// natEvent values (RFC 8158 section 4.1): NAT44 session create and delete.
// An adoption is a create here. IPv6 records (NAT66, which RFC 8158 gives
// no event of its own) carry the same values.
const (
	natEventSessionCreate = 4
	natEventSessionDelete = 5
)

// Template IDs (>= 256) and the set IDs of templates and the header.
const (
	templateV4  = 256
	templateV6  = 257
	setTemplate = 2
	ipfixVer    = 10
	msgHdrLen   = 16
	setHdrLen   = 4
	maxMsg      = 1400 // one message per datagram, below a usual MTU
	// templateEvery: templates are sent again this often over UDP
	// (RFC 7011 section 8.4), so a collector that restarts learns them.
	templateEvery = 10 * time.Second
)

type field struct{ id, len uint16 }

func template(v6 bool) []field {
	a := uint16(4)
	src, psrc, dst, pdst := uint16(ieSourceIPv4Address), uint16(iePostNATSourceIPv4), uint16(ieDestinationIPv4Address), uint16(iePostNATDestinationIPv4)
	if v6 {
		a = 16
		src, psrc, dst, pdst = ieSourceIPv6Address, iePostNATSourceIPv6, ieDestinationIPv6Address, iePostNATDestinationIPv6
	}
	return []field{
		{ieObservationTimeMillis, 8}, {ieNATEvent, 1}, {ieProtocolIdentifier, 1},
		{src, a}, {psrc, a}, {ieSourceTransportPort, 2}, {iePostNAPTSourcePort, 2},
		{dst, a}, {pdst, a}, {ieDestinationTransport, 2}, {iePostNAPTDestPort, 2},
	}
}

func recordLen(v6 bool) int {
	n := 0
	for _, f := range template(v6) {
		n += int(f.len)
	}
	return n
}

// exporter batches data records into IPFIX messages sent over UDP.
type exporter struct {
	conn     net.Conn
	seq      uint32 // data records sent so far (RFC 7011 sequence number)
	lastTmpl time.Time
	msg      []byte
	set      int // offset of the open data set's header, -1 if none
	setID    uint16
	count    uint32 // data records in msg
}

func dialExporter(addr string) (*exporter, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("IPFIX collector %s: %w", addr, err)
	}
	return &exporter{conn: c, set: -1}, nil
}

// add appends rec to the current message, sending it first if rec would
// not fit; templates go first in a message when due.
func (x *exporter) add(rec *Record, at time.Time) error {
	o := &rec.Flow.Orig
	v6 := !addr(o.Src).Is4()
	id := uint16(templateV4)
	if v6 {
		id = templateV6
	}
	n := recordLen(v6)
	var err error
	if len(x.msg) > 0 && len(x.msg)+n+setHdrLen > maxMsg {
		err = x.send()
	}
	if len(x.msg) == 0 {
		x.msg = append(x.msg[:0], make([]byte, msgHdrLen)...)
		if at.Sub(x.lastTmpl) >= templateEvery || x.lastTmpl.IsZero() {
			x.msg = appendTemplates(x.msg)
			x.lastTmpl = at
		}
		binary.BigEndian.PutUint32(x.msg[4:], uint32(at.Unix()))
	}
	if x.set < 0 || x.setID != id {
		x.closeSet()
		x.set, x.setID = len(x.msg), id
		x.msg = binary.BigEndian.AppendUint16(x.msg, id)
		x.msg = append(x.msg, 0, 0)
	}
	x.msg = appendData(x.msg, rec, at, v6)
	x.count++
	return err
}

func (x *exporter) closeSet() {
	if x.set >= 0 {
		binary.BigEndian.PutUint16(x.msg[x.set+2:], uint16(len(x.msg)-x.set))
		x.set = -1
	}
}

func appendTemplates(b []byte) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, setTemplate)
	b = append(b, 0, 0)
	for _, v6 := range []bool{false, true} {
		fs := template(v6)
		id := uint16(templateV4)
		if v6 {
			id = templateV6
		}
		b = binary.BigEndian.AppendUint16(b, id)
		b = binary.BigEndian.AppendUint16(b, uint16(len(fs)))
		for _, f := range fs {
			b = binary.BigEndian.AppendUint16(b, f.id)
			b = binary.BigEndian.AppendUint16(b, f.len)
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

func appendData(b []byte, rec *Record, at time.Time, v6 bool) []byte {
	o := &rec.Flow.Orig
	ev := byte(natEventSessionCreate)
	if rec.Event == EventEnd {
		ev = natEventSessionDelete
	}
	ip := func(b []byte, a conntrack.Addr) []byte {
		if v6 {
			return append(b, a[:]...)
		}
		return append(b, a[12:]...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMilli()))
	b = append(b, ev, o.Proto)
	b = ip(b, o.Src)
	b = ip(b, rec.Flow.NATAddr)
	b = binary.BigEndian.AppendUint16(b, o.SrcPort)
	b = binary.BigEndian.AppendUint16(b, rec.Flow.NATPort)
	b = ip(b, o.Dst)
	b = ip(b, o.Dst) // the destination is not translated
	b = binary.BigEndian.AppendUint16(b, o.DstPort)
	return binary.BigEndian.AppendUint16(b, o.DstPort)
}

// send sends the current message, if any.
func (x *exporter) send() error {
	if len(x.msg) == 0 {
		return nil
	}
	x.closeSet()
	binary.BigEndian.PutUint16(x.msg[0:], ipfixVer)
	binary.BigEndian.PutUint16(x.msg[2:], uint16(len(x.msg)))
	binary.BigEndian.PutUint32(x.msg[8:], x.seq) // sequence of the first record in it
	// observation domain ID (msg[12:16]) stays 0: one domain per gateway.
	x.seq += x.count
	x.count = 0
	_, err := x.conn.Write(x.msg)
	x.msg = x.msg[:0]
	if err != nil {
		return fmt.Errorf("IPFIX: %w", err)
	}
	return nil
}

func (x *exporter) close() {
	x.send()
	x.conn.Close()
}
