package engine

import (
	"reflect"
	"testing"
)

// TestIoctlStructsHoldPointers: a struct the kernel reads a pointer from
// must hold it as unsafe.Pointer. A uintptr is invisible to the garbage
// collector, which may then free or move the pointed-to object.
func TestIoctlStructsHoldPointers(t *testing.T) {
	for _, v := range []any{ifreqData{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			if f := typ.Field(i); f.Type.Kind() == reflect.Uintptr {
				t.Errorf("%v.%s is a uintptr; hold the pointer as unsafe.Pointer", typ, f.Name)
			}
		}
	}
	if n := rxQueues("lo"); n < 1 {
		t.Errorf("rxQueues(lo) = %d, want at least 1", n)
	}
}
