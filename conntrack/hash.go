package conntrack

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
)

// hasher is a keyed multiply-fold hash of a Tuple (wyhash-style). The key is
// random per table so that outside hosts, which choose half of every reply
// tuple, cannot aim their flows at one chain of the index.
type hasher struct {
	s [6]uint64
}

func newHasher() hasher {
	var b [48]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; a fixed key only costs
		// flooding resistance, never correctness.
		b = [48]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	}
	var h hasher
	for i := range h.s {
		h.s[i] = binary.LittleEndian.Uint64(b[i*8:]) | 1
	}
	return h
}

func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hash returns a 64-bit hash of k: the low bits choose the shard, the high
// 32 bits are the index tag and home position.
func (h *hasher) hash(k *Tuple) uint64 {
	a := binary.LittleEndian.Uint64(k.Src[0:8])
	b := binary.LittleEndian.Uint64(k.Src[8:16])
	c := binary.LittleEndian.Uint64(k.Dst[0:8])
	d := binary.LittleEndian.Uint64(k.Dst[8:16])
	e := uint64(k.SrcPort) | uint64(k.DstPort)<<16 | uint64(k.Proto)<<32
	x := mum(a^h.s[0], b^h.s[1]) ^ mum(c^h.s[2], d^h.s[3]) ^ mum(e^h.s[4], h.s[5])
	// Final avalanche so that both the low (shard) and high (tag) bits
	// depend on every input bit.
	x ^= x >> 32
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	return x
}
