package conntrack

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The export record, version 2 (all integers big-endian; version 1 had an
// 8-byte Aux):
//
//	 0      1  version (2)
//	 1      1  flags: bit 0 set = IPv4, the three addresses are 4 bytes each
//	 2      1  protocol
//	 3      1  state (State)
//	 4      2  original source port (pod port, or ICMP identifier)
//	 6      2  original destination port (server port)
//	 8      2  NAT port
//	10      4  remaining idle lifetime in milliseconds
//	14      4  Aux
//	18   4|16  original source address (pod)
//	     4|16  original destination address (server)
//	     4|16  NAT address (egress IP)
//
// An IPv4 record is 30 bytes, an IPv6 one 66. A stream (Export/Import) is the
// 4-byte magic "EGCT" followed by records back to back.
const (
	RecordVersion  = 2
	recordHeader   = 18
	RecordLenIPv4  = recordHeader + 3*4
	RecordLenIPv6  = recordHeader + 3*16
	recFlagIPv4    = 1
	maxRemainingMS = 1<<32 - 1
)

var streamMagic = [4]byte{'E', 'G', 'C', 'T'}

// ErrBadRecord means an export record or stream is malformed.
var ErrBadRecord = errors.New("conntrack: malformed export record")

var v4prefix = [12]byte{10: 0xff, 11: 0xff}

func isV4(a *Addr) bool { return [12]byte(a[:12]) == v4prefix }

// AppendRecord appends f's export record with the given remaining lifetime
// to dst and returns the extended slice.
func AppendRecord(dst []byte, f *Flow, remaining time.Duration) []byte {
	v4 := isV4(&f.Orig.Src) && isV4(&f.Orig.Dst) && isV4(&f.NATAddr)
	var flags byte
	if v4 {
		flags = recFlagIPv4
	}
	ms := remaining.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	if ms > maxRemainingMS {
		ms = maxRemainingMS
	}
	dst = append(dst, RecordVersion, flags, f.Orig.Proto, byte(f.State))
	dst = binary.BigEndian.AppendUint16(dst, f.Orig.SrcPort)
	dst = binary.BigEndian.AppendUint16(dst, f.Orig.DstPort)
	dst = binary.BigEndian.AppendUint16(dst, f.NATPort)
	dst = binary.BigEndian.AppendUint32(dst, uint32(ms))
	dst = binary.BigEndian.AppendUint32(dst, f.Aux)
	for _, a := range [3]*Addr{&f.Orig.Src, &f.Orig.Dst, &f.NATAddr} {
		if v4 {
			dst = append(dst, a[12:]...)
		} else {
			dst = append(dst, a[:]...)
		}
	}
	return dst
}

// recordLen returns the length of the record whose first two bytes are in b.
func recordLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, fmt.Errorf("%w: %d bytes, need at least 2", ErrBadRecord, len(b))
	}
	if b[0] != RecordVersion {
		return 0, fmt.Errorf("%w: version %d, this build reads %d", ErrBadRecord, b[0], RecordVersion)
	}
	switch b[1] {
	case 0:
		return RecordLenIPv6, nil
	case recFlagIPv4:
		return RecordLenIPv4, nil
	}
	return 0, fmt.Errorf("%w: unknown flags %#x", ErrBadRecord, b[1])
}

// DecodeRecord parses the record at the start of b. It returns the flow, its
// remaining lifetime and the record's length.
func DecodeRecord(b []byte) (f Flow, remaining time.Duration, n int, err error) {
	n, err = recordLen(b)
	if err != nil {
		return f, 0, 0, err
	}
	if len(b) < n {
		return f, 0, 0, fmt.Errorf("%w: %d bytes, record needs %d", ErrBadRecord, len(b), n)
	}
	f.Orig.Proto = b[2]
	f.State = State(b[3])
	if !f.State.validFor(f.Orig.Proto) {
		return Flow{}, 0, 0, fmt.Errorf("%w: state %v is impossible for protocol %d", ErrBadRecord, f.State, f.Orig.Proto)
	}
	f.Orig.SrcPort = binary.BigEndian.Uint16(b[4:])
	f.Orig.DstPort = binary.BigEndian.Uint16(b[6:])
	f.NATPort = binary.BigEndian.Uint16(b[8:])
	remaining = time.Duration(binary.BigEndian.Uint32(b[10:])) * time.Millisecond
	f.Aux = binary.BigEndian.Uint32(b[14:])
	p := b[recordHeader:n]
	for _, a := range [3]*Addr{&f.Orig.Src, &f.Orig.Dst, &f.NATAddr} {
		if n == RecordLenIPv4 {
			copy(a[:12], v4prefix[:])
			copy(a[12:], p[:4])
			p = p[4:]
		} else {
			copy(a[:], p[:16])
			p = p[16:]
		}
	}
	return f, remaining, n, nil
}

// ImportFlow adds f with its state f.State and the given remaining lifetime
// (at most the state's timeout), as replicated from another gateway.
func (t *Table) ImportFlow(f *Flow, remaining time.Duration, now int64) error {
	if !f.State.validFor(f.Orig.Proto) {
		return fmt.Errorf("%w: state %v is impossible for protocol %d", ErrBadRecord, f.State, f.Orig.Proto)
	}
	rem := int64(remaining)
	if rem < 0 {
		rem = 0
	}
	if max := t.to[f.State]; rem > max {
		rem = max
	}
	return t.insert(f, f.State, now+rem)
}

// exportChunk is how many entries Range copies per lock hold.
const exportChunk = 256

// Range calls fn for every flow with its remaining lifetime relative to
// now (negative once past its deadline, until Expire removes it). Each
// shard is locked for at most exportChunk entries at a time and fn runs
// outside the locks, so the data plane keeps running; flows inserted or
// removed meanwhile may or may not be seen. fn must not keep f.
func (t *Table) Range(now int64, fn func(f *Flow, remaining time.Duration)) {
	t.RangeSlots(now, nil, func(_ uint32, f *Flow, rem time.Duration) bool {
		if f != nil {
			fn(f, rem)
		}
		return true
	})
}

// Export writes every flow as a stream of records to w, with remaining
// lifetimes relative to now, as Range sees them. It returns the number of
// records.
func (t *Table) Export(w io.Writer, now int64) (int, error) {
	if _, err := w.Write(streamMagic[:]); err != nil {
		return 0, fmt.Errorf("conntrack: export: %w", err)
	}
	buf := make([]byte, 0, exportChunk*RecordLenIPv6)
	count := 0
	var werr error
	flush := func() {
		if len(buf) > 0 && werr == nil {
			_, werr = w.Write(buf)
		}
		buf = buf[:0]
	}
	t.Range(now, func(f *Flow, rem time.Duration) {
		if werr != nil {
			return
		}
		buf = AppendRecord(buf, f, rem)
		count++
		if len(buf) > (exportChunk-1)*RecordLenIPv6 {
			flush()
		}
	})
	flush()
	if werr != nil {
		return count, fmt.Errorf("conntrack: export: %w", werr)
	}
	return count, nil
}

// Import reads a stream written by Export and adds its flows, with their
// states and remaining lifetimes relative to now. Flows already tracked are
// skipped. It stops at the first malformed record (ErrBadRecord) or when
// the table is full (ErrFull), and returns how many flows it added.
func (t *Table) Import(r io.Reader, now int64) (int, error) {
	br := bufio.NewReader(r)
	var magic [4]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return 0, fmt.Errorf("%w: stream header: %v", ErrBadRecord, err)
	}
	if magic != streamMagic {
		return 0, fmt.Errorf("%w: stream does not start with %q", ErrBadRecord, streamMagic[:])
	}
	var rec [RecordLenIPv6]byte
	added := 0
	for {
		if _, err := io.ReadFull(br, rec[:2]); err != nil {
			if err == io.EOF {
				return added, nil
			}
			return added, fmt.Errorf("%w: record %d: %v", ErrBadRecord, added, err)
		}
		n, err := recordLen(rec[:2])
		if err != nil {
			return added, err
		}
		if _, err := io.ReadFull(br, rec[2:n]); err != nil {
			return added, fmt.Errorf("%w: record truncated: %v", ErrBadRecord, err)
		}
		f, rem, _, err := DecodeRecord(rec[:n])
		if err != nil {
			return added, err
		}
		switch err := t.ImportFlow(&f, rem, now); {
		case err == nil:
			added++
		case errors.Is(err, ErrExists):
		default:
			return added, err
		}
	}
}
