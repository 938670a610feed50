//go:build !amd64

package conntrack

func prefetchLine(addr uintptr)  {}
func prefetchSpan(addr uintptr)  {}
func prefetchSpanW(addr uintptr) {}
