package nat

import "testing"

// The endpoint table against a map model: random inserts and removes at
// high load, with a tiny table so probe runs wrap around the end, checking
// every live key is found with its value after each step.
func TestEndpointTableMatchesMap(t *testing.T) {
	var tab epTable
	model := map[epSlot]uint16{} // key: src+sport, value: port
	key := func(src Addr, sport uint16) epSlot { return epSlot{src: src, sport: sport} }
	r := rng(9)
	var keys []epSlot
	for step := 0; step < 20000; step++ {
		x := r.next()
		// Few distinct keys, so inserts and removes of the same keys interleave.
		src, sport := v4(10, 0, 0, byte(x%16)), uint16(x>>8%8)
		k := key(src, sport)
		i := tab.find(&src, sport)
		port, ok := model[k]
		if (i >= 0) != ok || (ok && tab.slots[i].port != port) {
			t.Fatalf("step %d: find(%v:%d) = %d, model %v/%d", step, src, sport, i, ok, port)
		}
		if ok {
			tab.remove(i)
			delete(model, k)
		} else {
			p := uint16(1 + x>>16%65535)
			tab.insert(&src, sport, p)
			model[k] = p
			keys = append(keys, k)
		}
		if tab.n != len(model) {
			t.Fatalf("step %d: n = %d, model %d", step, tab.n, len(model))
		}
		if step%97 == 0 {
			for _, k := range keys {
				i := tab.find(&k.src, k.sport)
				p, ok := model[k]
				if (i >= 0) != ok || (ok && tab.slots[i].port != p) {
					t.Fatalf("step %d: key %v:%d lost after removes", step, k.src, k.sport)
				}
			}
		}
	}
	if len(tab.slots) != epTableMin {
		t.Fatalf("table grew to %d slots for at most 128 keys", len(tab.slots))
	}
}
