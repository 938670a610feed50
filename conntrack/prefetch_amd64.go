package conntrack

// prefetchLine asks the CPU to start loading the cache line at addr without
// waiting for it (PREFETCHT0). It never faults, whatever addr is.
//
//go:noescape
func prefetchLine(addr uintptr)
