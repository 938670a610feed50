package nat

import (
	"encoding/binary"
	"math/bits"
)

// The hash constants are fixed forever: every gateway, of every version,
// must pick the same egress IP for the same flow.
const (
	flowSeed = 0x2d358dccaa6c78a5
	ipSeed   = 0x8bb84b93962eacc9
	epSeed   = 0x4b33a62ed433d4a3
	k1       = 0x9e3779b97f4a7c15
	k2       = 0xc2b2ae3d27d4eb4f
)

// round folds one 64-bit word into the running hash.
func round(h, w uint64) uint64 {
	return bits.RotateLeft64((h^w)*k1, 31) * k2
}

// fmix is the MurmurHash3 64-bit finaliser: every input bit reaches every
// output bit, so rendezvous scores of nearby inputs are independent.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func addrWords(a *Addr) (uint64, uint64) {
	return binary.LittleEndian.Uint64(a[0:8]), binary.LittleEndian.Uint64(a[8:16])
}

// FlowHash is a fixed-seed hash of a flow's pod-side 5-tuple, stable across
// processes, restarts and gateways (byte order fixed), for Pick.
func FlowHash(proto uint8, src Addr, sport uint16, dst Addr, dport uint16) uint64 {
	s0, s1 := addrWords(&src)
	d0, d1 := addrWords(&dst)
	h := uint64(flowSeed)
	h = round(h, s0)
	h = round(h, s1)
	h = round(h, d0)
	h = round(h, d1)
	h = round(h, uint64(sport)|uint64(dport)<<16|uint64(proto)<<32)
	return fmix(h)
}

// EndpointHash hashes the pod's endpoint src:sport only. Use it instead of
// FlowHash for Pick when a protocol has endpoint-independent mapping, so all
// flows of one endpoint leave from one egress IP (and so one mapping).
func EndpointHash(proto uint8, src Addr, sport uint16) uint64 {
	s0, s1 := addrWords(&src)
	h := uint64(epSeed)
	h = round(h, s0)
	h = round(h, s1)
	h = round(h, uint64(sport)|uint64(proto)<<32)
	return fmix(h)
}

func ipKey(a *Addr) uint64 {
	w0, w1 := addrWords(a)
	return fmix(round(round(ipSeed, w0), w1))
}

// Pick chooses, for a flow with hash h, one of ips by rendezvous (highest
// random weight) hashing: each IP scores fmix(h ^ key(ip)) and the highest
// wins. A flow keeps its IP while that IP stays in the set, removing an IP
// moves only the flows that had it, and the result does not depend on the
// order of ips. It returns the index into ips, or -1 when ips is empty.
func Pick(ips []Addr, h uint64) int {
	best := -1
	var bestScore uint64
	for i := range ips {
		s := fmix(h ^ ipKey(&ips[i]))
		if best < 0 || s > bestScore || (s == bestScore && addrLess(&ips[i], &ips[best])) {
			best, bestScore = i, s
		}
	}
	return best
}

func addrLess(a, b *Addr) bool {
	a0, b0 := binary.BigEndian.Uint64(a[0:8]), binary.BigEndian.Uint64(b[0:8])
	if a0 != b0 {
		return a0 < b0
	}
	return binary.BigEndian.Uint64(a[8:16]) < binary.BigEndian.Uint64(b[8:16])
}
