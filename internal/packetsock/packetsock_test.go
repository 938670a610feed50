//go:build linux

package packetsock

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// The kernel reads the protocol as a big-endian 16-bit field from memory.
func TestAddrProtocolIsNetworkOrder(t *testing.T) {
	for _, p := range []uint16{unix.ETH_P_ALL, unix.ETH_P_ARP, unix.ETH_P_IPV6, 0x1234} {
		var mem [2]byte
		binary.NativeEndian.PutUint16(mem[:], Addr(p, 7).Protocol)
		if got := binary.BigEndian.Uint16(mem[:]); got != p {
			t.Errorf("EtherType %#04x: memory holds %#04x in network order", p, got)
		}
		if Addr(p, 7).Ifindex != 7 {
			t.Errorf("ifindex lost")
		}
	}
}
