package conntrack

// prefetchLine asks the CPU to start loading the cache line at addr without
// waiting for it (PREFETCHT0). It never faults, whatever addr is.
//
//go:noescape
func prefetchLine(addr uintptr)

// prefetchSpan is prefetchLine for both lines of the 72-byte entry at addr
// (a 72-byte entry always spans exactly two 64-byte lines): one call, not two.
//
//go:noescape
func prefetchSpan(addr uintptr)

// prefetchSpanW is prefetchSpan for an entry about to be written
// (PREFETCHW: the lines arrive exclusive, so the stores need no second trip).
//
//go:noescape
func prefetchSpanW(addr uintptr)
