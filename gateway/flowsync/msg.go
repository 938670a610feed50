package flowsync

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
)

// A message is a type byte and a sequence number, then for a batch its
// items back to back:
//
//	batch  1 | seq (8)  | items
//	ack    2 | seq (8)             the receiver applied every batch up to seq
//
//	item 'P' | aux (4) | VTEP (16) | tunnel (1) | VNI (4)   the return path of the sender's aux
//	item 'U' | conntrack export record (v2)                 a flow is new or changed
//	item 'D' | conntrack export record (v2)                 a flow is gone
//	item 'B'                                                a full resync begins
//	item 'E'                                                it ends: flows not sent since 'B' are gone
//
// A batch's sequence number is the sender's byte count of batches sent in
// the session so far, itself included: strictly increasing, and the gap
// between it and the last ack is what is in flight (Sender.Window).
const (
	msgBatch = 1
	msgAck   = 2

	itemPath   = 'P'
	itemUpsert = 'U'
	itemDelete = 'D'
	itemBegin  = 'B'
	itemEnd    = 'E'

	msgHeader = 1 + 8
	pathLen   = 4 + 16 + 1 + 4
)

func appendHeader(b []byte, typ byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, typ), seq)
}

func appendPath(b []byte, aux uint32, rp gateway.ReturnPath) []byte {
	b = binary.BigEndian.AppendUint32(append(b, itemPath), aux)
	v := rp.VTEP.As16()
	b = append(append(b, v[:]...), byte(rp.Tunnel.Tunnel))
	return binary.BigEndian.AppendUint32(b, rp.Tunnel.VNI)
}

// header parses a message's type and sequence number.
func header(msg []byte) (typ byte, seq uint64, body []byte, err error) {
	if len(msg) < msgHeader {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes", errMalformed, len(msg))
	}
	return msg[0], binary.BigEndian.Uint64(msg[1:]), msg[msgHeader:], nil
}

// item is one parsed batch item.
type item struct {
	kind byte
	aux  uint32             // kind 'P'
	path gateway.ReturnPath // kind 'P'
	flow conntrack.Flow     // kinds 'U', 'D'
	rem  int64              // kind 'U': remaining lifetime, ns
}

// next parses the item at the start of b and returns the rest.
func next(b []byte, it *item) ([]byte, error) {
	it.kind = b[0]
	b = b[1:]
	switch it.kind {
	case itemBegin, itemEnd:
		return b, nil
	case itemPath:
		if len(b) < pathLen {
			return nil, fmt.Errorf("%w: path item of %d bytes", errMalformed, len(b))
		}
		it.aux = binary.BigEndian.Uint32(b)
		it.path = gateway.ReturnPath{VTEP: netip.AddrFrom16([16]byte(b[4:20])).Unmap(),
			Tunnel: gateway.TunnelVNI{Tunnel: gateway.Tunnel(b[20]), VNI: binary.BigEndian.Uint32(b[21:])}}
		return b[pathLen:], nil
	case itemUpsert, itemDelete:
		f, rem, n, err := conntrack.DecodeRecord(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errMalformed, err)
		}
		it.flow, it.rem = f, int64(rem)
		return b[n:], nil
	}
	return nil, fmt.Errorf("%w: item kind %#x", errMalformed, it.kind)
}
