//go:build !amd64

package conntrack

func prefetchLine(addr uintptr) {}
