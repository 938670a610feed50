//go:build !amd64

package conntrack

// tagSlots returns which slots of bucket w hold a key with tag (the bits of
// mask): bit j for slot j, 1 to 15, never bit 0 (the header). Only the
// lock-free path (amd64) calls it; this is its meaning, which the tests
// check the assembly against.
func tagSlots(w *[bucketWords]uint32, tag, mask uint32) uint32 {
	var m uint32
	for j := 1; j < bucketWords; j++ {
		if w[j]&mask == tag {
			m |= 1 << j
		}
	}
	return m
}
