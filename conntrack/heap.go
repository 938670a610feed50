package conntrack

import "unsafe"

// heapTable returns size zeroed bytes of pointer-free heap memory starting
// on a 64-byte boundary, so that every index bucket is one cache line.
func heapTable(size int) []byte {
	b := make([]byte, size+64)
	off := -uintptr(unsafe.Pointer(unsafe.SliceData(b))) & 63
	return b[off : off+uintptr(size) : off+uintptr(size)]
}
