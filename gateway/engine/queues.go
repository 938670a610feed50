package engine

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ifreqData is struct ifreq with the ifr_data pointer member.
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data uintptr
	_    [16]byte
}

// rxQueues asks ethtool (ETHTOOL_GCHANNELS) how many receive queues the
// interface uses now: what an XDP socket may bind to. Devices without
// channel support have one.
func rxQueues(ifname string) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 1
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	var req ifreqData
	copy(req.Name[:len(req.Name)-1], ifname)
	req.Data = uintptr(unsafe.Pointer(&ch))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	if e != 0 {
		return 1
	}
	n := int(ch.RxCount + ch.CombinedCount)
	if n < 1 {
		return 1
	}
	return n
}
