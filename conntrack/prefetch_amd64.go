package conntrack

// prefetchLine asks the CPU to start loading the cache line at addr without
// waiting for it (PREFETCHT0). It never faults, whatever addr is.
//
//go:noescape
func prefetchLine(addr uintptr)

// prefetchLineW is prefetchLine for a line about to be written (PREFETCHW:
// it arrives exclusive, so the stores need no second trip).
//
//go:noescape
func prefetchLineW(addr uintptr)

// prefetchN is prefetchLine for each of the n addresses from p on, in one
// loop with nothing between the prefetches (see trackBatch).
//
//go:noescape
func prefetchN(p *uintptr, n int)
