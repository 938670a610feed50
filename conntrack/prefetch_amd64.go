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

// prefetchLines is prefetchLine for two lines, in one call.
//
//go:noescape
func prefetchLines(a, b uintptr)
