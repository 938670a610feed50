//go:build !race

package conntrack

// raceEnabled reports a race-detector build; fast.go keeps the unlocked
// lookup path out of such builds, where its reads would rightly be reported.
const raceEnabled = false
