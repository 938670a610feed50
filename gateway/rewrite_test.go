package gateway

import (
	"encoding/binary"
	"math/rand"
	"testing"
)

// TestCsumDelta checks the combined incremental update against a full
// recomputation with the reference sum, on random buffers from a fixed seed.
func TestCsumDelta(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 10000; i++ {
		n := 4 + 4*rng.Intn(5)
		buf := make([]byte, 40+rng.Intn(40))
		rng.Read(buf)
		binary.BigEndian.PutUint16(buf[0:], 0)
		binary.BigEndian.PutUint16(buf[0:], ^refSum(buf))
		off := 4 + 4*rng.Intn((len(buf)-4-n)/4)
		nw := make([]byte, n)
		rng.Read(nw)
		if i%7 == 0 {
			copy(nw, buf[off:off+n]) // unchanged field
		}
		c := csumApply(binary.BigEndian.Uint16(buf), csumDelta(buf[off:off+n], nw))
		copy(buf[off:], nw)
		binary.BigEndian.PutUint16(buf, c)
		if got := refSum(buf); got != 0xffff {
			t.Fatalf("case %d: sum %#04x after incremental update", i, got)
		}
	}
}
