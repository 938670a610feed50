//go:build linux

// Package packetsock opens AF_PACKET sockets: the one place that turns an
// EtherType into the network byte order the kernel expects in socket(2) and
// in a link-layer address.
package packetsock

import "golang.org/x/sys/unix"

// Open returns a close-on-exec AF_PACKET socket of the given type
// (unix.SOCK_RAW or unix.SOCK_DGRAM) that receives frames of EtherType proto
// (0: none until the socket is bound).
func Open(typ int, proto uint16) (int, error) {
	return unix.Socket(unix.AF_PACKET, typ|unix.SOCK_CLOEXEC, int(htons(proto)))
}

// Addr is the link-layer address for EtherType proto on interface ifindex
// (0: every interface), for bind(2) and sendto(2).
func Addr(proto uint16, ifindex int) *unix.SockaddrLinklayer {
	return &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
