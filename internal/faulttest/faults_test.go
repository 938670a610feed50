package faulttest

import (
	"slices"
	"testing"
)

func TestThrottleBeforeFailuresInOrder(t *testing.T) {
	var f Faults[string]
	f.Throttle(1, "slow down")
	f.Fail("get", "first", 1)
	f.Fail("put", "x", 2)
	f.Fail("put", "", 0) // clears
	want := []struct {
		method string
		e      string
		kind   Fault
	}{
		{"get", "slow down", Throttled},
		{"get", "first", Failed},
		{"get", "", None},
		{"put", "", None},
	}
	for i, w := range want {
		if e, k := f.Next(w.method); e != w.e || k != w.kind {
			t.Errorf("call %d (%s): %q %v, want %q %v", i, w.method, e, k, w.e, w.kind)
		}
	}
	if got := f.Calls(); !slices.Equal(got, []string{"get", "get", "get", "put"}) {
		t.Errorf("calls %v", got)
	}
}
