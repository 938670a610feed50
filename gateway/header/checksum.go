package header

import (
	"encoding/binary"
	"math/bits"
)

// Checksum adds buf to the running RFC 1071 one's-complement sum initial and
// returns the new running sum, folded to at most 16 significant bits.
//
// Sums of several buffers chain (Checksum(b, Checksum(a, 0))) as long as
// every buffer but the last has an even length. The value to store in a
// checksum field is ChecksumFold of the final sum.
func Checksum(buf []byte, initial uint32) uint32 {
	// One's-complement addition is byte-order independent (RFC 1071 §2(B)),
	// so the bulk is summed as native little-endian 64-bit words and the
	// 16-bit result is byte-swapped once at the end.
	var acc, carry uint64
	for len(buf) >= 32 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(buf[0:8]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(buf[8:16]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(buf[16:24]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(buf[24:32]), carry)
		buf = buf[32:]
	}
	for len(buf) >= 8 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(buf[0:8]), carry)
		buf = buf[8:]
	}
	acc, carry = bits.Add64(acc, carry, 0)
	acc += carry // cannot overflow again: acc is at most 2^64-2 here when carry is 1
	if len(buf) >= 4 {
		acc, carry = bits.Add64(acc, uint64(binary.LittleEndian.Uint32(buf[0:4])), 0)
		acc += carry
		buf = buf[4:]
	}
	if len(buf) >= 2 {
		acc, carry = bits.Add64(acc, uint64(binary.LittleEndian.Uint16(buf[0:2])), 0)
		acc += carry
		buf = buf[2:]
	}
	if len(buf) == 1 {
		// The odd byte is the high byte of a zero-padded big-endian word,
		// which is the low byte in the little-endian domain.
		acc, carry = bits.Add64(acc, uint64(buf[0]), 0)
		acc += carry
	}
	s := fold64(acc)
	s = bits.ReverseBytes16(s)
	return uint32(fold64(uint64(s) + uint64(initial)))
}

// fold64 folds a 64-bit one's-complement sum to 16 bits with end-around carry.
func fold64(s uint64) uint16 {
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 32) + (s & 0xffffffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}

// ChecksumFold folds a running sum to 16 bits and complements it, giving the
// value to store in a checksum field (like Linux csum_fold). Over data that
// includes a correct checksum field the result is 0.
func ChecksumFold(sum uint32) uint16 {
	return ^fold64(uint64(sum))
}

// PseudoHeaderChecksum returns the running sum of the TCP/UDP/ICMPv6
// pseudo-header: IPv4 (RFC 768/793) when src and dst are 4 bytes, IPv6
// (RFC 8200 §8.1) when they are 16 bytes. length is the upper-layer length.
func PseudoHeaderChecksum(proto uint8, src, dst []byte, length uint16) uint32 {
	s := Checksum(src, 0)
	s = Checksum(dst, s)
	return uint32(fold64(uint64(s) + uint64(proto) + uint64(length)))
}

// ChecksumUpdate16 returns checksum field check updated for one 16-bit word
// of the covered data changing from old to new (RFC 1624 eqn. 3:
// HC' = ~(~HC + ~m + m')).
func ChecksumUpdate16(check, old, new uint16) uint16 {
	return ^fold32(uint32(^check) + uint32(^old) + uint32(new))
}

// fold32 folds a sum of at most 0x10000 16-bit words to 16 bits.
func fold32(s uint32) uint16 {
	s = (s >> 16) + (s & 0xffff)
	s = (s >> 16) + (s & 0xffff)
	return uint16(s)
}

// ChecksumUpdateAddr returns checksum field check updated for an address in
// the covered data (or pseudo-header) changing from old to new. old and new
// must have the same even length (4 or 16 bytes for IP addresses); other
// lengths leave check unchanged.
func ChecksumUpdateAddr(check uint16, old, new []byte) uint16 {
	if len(old) != len(new) || len(old)&1 != 0 {
		return check
	}
	s := uint64(^check)
	for i := 0; i+1 < len(old); i += 2 {
		s += uint64(^binary.BigEndian.Uint16(old[i:])) + uint64(binary.BigEndian.Uint16(new[i:]))
	}
	return ^fold64(s)
}

// ChecksumDelta returns the one's-complement difference (RFC 1624: the sum
// of ~m + m') of a field of the covered data changing from old to new,
// summed as 32-bit words: old and new have the same length, a multiple of
// 4 (an IPv4 or IPv6 address). A rewrite computes it once and applies it
// with ChecksumApplyDelta to every checksum covering the field (IP header,
// TCP, UDP, ICMPv6), adding the deltas of its other changes.
func ChecksumDelta(old, new []byte) uint64 {
	var d uint64
	for i := 0; i+4 <= len(old) && i+4 <= len(new); i += 4 {
		d += uint64(^binary.BigEndian.Uint32(old[i:])) + uint64(binary.BigEndian.Uint32(new[i:]))
	}
	return d
}

// ChecksumDelta16 returns the delta of one 16-bit word changing from old to
// new, to add to a ChecksumDelta.
func ChecksumDelta16(old, new uint16) uint64 { return uint64(^old) + uint64(new) }

// ChecksumDeltaIPv4 is ChecksumDelta for an IPv4 address, taking the
// arrays the IPv4 view returns.
func ChecksumDeltaIPv4(old, new [4]byte) uint64 {
	return uint64(^binary.BigEndian.Uint32(old[:])) + uint64(binary.BigEndian.Uint32(new[:]))
}

// ChecksumApplyDelta returns checksum field check updated by delta d, a sum
// of deltas of at most 2^31 words (RFC 1624 eqn. 3: HC' = ~(~HC + d)).
func ChecksumApplyDelta(check uint16, d uint64) uint16 {
	s := uint64(^check) + d
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return ^uint16(s)
}

// UDPChecksumValue maps a computed UDP checksum to the value sent on the
// wire: a computed 0 is sent as 0xffff, because 0 means "no checksum"
// (RFC 768).
func UDPChecksumValue(c uint16) uint16 {
	if c == 0 {
		return 0xffff
	}
	return c
}
