package metrics

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// XDPRingStats are an AF_XDP socket's kernel statistics (XDP_STATISTICS).
type XDPRingStats struct {
	RxDropped      uint64 // frames dropped for reasons other than invalid descriptors (e.g. too big)
	RxInvalidDescs uint64 // invalid descriptors on the fill ring
	TxInvalidDescs uint64 // invalid descriptors on the TX ring
	RxRingFull     uint64 // frames dropped because the RX ring was full
	FillRingEmpty  uint64 // times the fill ring had no buffer for a frame
	TxRingEmpty    uint64 // times the TX ring was found empty when the kernel looked
}

func (s *XDPRingStats) add(o *XDPRingStats) {
	s.RxDropped += o.RxDropped
	s.RxInvalidDescs += o.RxInvalidDescs
	s.TxInvalidDescs += o.TxInvalidDescs
	s.RxRingFull += o.RxRingFull
	s.FillRingEmpty += o.FillRingEmpty
	s.TxRingEmpty += o.TxRingEmpty
}

// ReadXDPRingStats reads the statistics of the AF_XDP socket fd (the XSK's
// FD()) with getsockopt(SOL_XDP, XDP_STATISTICS). Kernels before 5.9 return
// only the first three fields; the others are then 0.
func ReadXDPRingStats(fd int) (XDPRingStats, error) {
	var st unix.XDPStatistics
	n := uint32(unsafe.Sizeof(st))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return XDPRingStats{}, fmt.Errorf("metrics: read AF_XDP statistics of socket %d: %w", fd, errno)
	}
	return XDPRingStats{
		RxDropped: st.Rx_dropped, RxInvalidDescs: st.Rx_invalid_descs, TxInvalidDescs: st.Tx_invalid_descs,
		RxRingFull: st.Rx_ring_full, FillRingEmpty: st.Rx_fill_ring_empty_descs, TxRingEmpty: st.Tx_ring_empty_descs,
	}, nil
}
