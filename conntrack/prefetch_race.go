//go:build race

package conntrack

// Prefetch does nothing in race-detector builds; see prefetch.go.
func (t *Table) Prefetch(k *Tuple) {}

// PrefetchEntry does nothing in race-detector builds; see prefetch.go.
func (t *Table) PrefetchEntry(k *Tuple) {}

// raceEnabled reports a race-detector build.
const raceEnabled = true
