//go:build !amd64

package conntrack

func prefetchLine(addr uintptr)  {}
func prefetchLineW(addr uintptr) {}

func prefetchN(p *uintptr, n int) {}
