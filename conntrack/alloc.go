//go:build linux && !race

package conntrack

import (
	"fmt"
	"os"
	"syscall"
)

// allocTable returns zeroed memory for the table, outside the Go heap: the
// GC never sees it at all, and it is backed by transparent huge pages where
// the kernel allows (with 4 KiB pages a random lookup in a 1 GB table is a
// TLB miss and a page walk; with 2 MiB pages the whole table is in the TLB's
// reach). The pages are touched here so that no packet pays for a page
// fault and the memory is really there. free returns it to the kernel.
//
// Tables under 32 MiB come from the Go heap (pointer-free, so never scanned):
// their TLB footprint is small, and the GC, which does not count off-heap
// memory, frees them promptly when they are dropped.
func allocTable(size int) (mem []byte, free func(), err error) {
	if size < 32<<20 {
		return heapTable(size), func() {}, nil
	}
	const huge = 2 << 20
	size = (size + huge - 1) &^ (huge - 1)
	mem, err = syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("conntrack: cannot map %d bytes for the flow table: %w", size, err)
	}
	// Without THP (or with it disabled) this fails or does nothing; the
	// table works the same, only with more TLB misses.
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 0
	}
	return mem, func() { _ = syscall.Munmap(mem) }, nil
}
