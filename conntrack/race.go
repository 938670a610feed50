//go:build race

package conntrack

// raceEnabled reports a race-detector build; see norace.go.
const raceEnabled = true
