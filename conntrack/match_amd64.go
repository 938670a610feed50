package conntrack

// tagSlots returns which slots of bucket w hold a key with tag (the bits of
// mask): bit j for slot j, 1 to 15, never bit 0 (the header). In SSE2, four
// compares and no branch: findTag's scan slot by slot mispredicts once per
// lookup, on the slot that matched, and the same test in Go took about 110
// instructions.
//
//go:noescape
func tagSlots(w *[bucketWords]uint32, tag, mask uint32) uint32
