//go:build !amd64

package conntrack

func prefetchLine(addr uintptr)  {}
func prefetchLineW(addr uintptr) {}

func prefetchLines(a, b uintptr) {}
