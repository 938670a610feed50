package conntrack

import "time"

// A flow's deadline is kept in 32-bit ticks of 2^tickShift ns (~16.8 ms)
// rather than in 64-bit nanoseconds, so that an entry fits one 64-byte cache
// line. Ticks wrap (every ~2.3 years); comparisons take the signed
// difference, which is right while the two sides are less than 2^31 ticks
// (~417 days) apart. Deadlines are at most the longest timeout (a year) plus
// refreshSlack ahead of now, and Expire sweeps every entry continuously, so
// an expired entry is removed long before it could look young again.
const tickShift = 24

// tickFloor is the tick ns falls in.
func tickFloor(ns int64) uint32 { return uint32(ns >> tickShift) }

// tickCeil is the first tick boundary at or after ns: a deadline stored
// this way is never earlier than asked.
func tickCeil(ns int64) uint32 { return uint32((ns + (1<<tickShift - 1)) >> tickShift) }

// expired reports whether deadline d has passed at now: at most one tick
// after the nanosecond deadline it was made from, never before.
func expired(now int64, d uint32) bool { return int32(tickFloor(now)-d) >= 0 }

// covers reports whether deadline d is no earlier than ns.
func covers(d uint32, ns int64) bool { return int32(d-tickCeil(ns)) >= 0 }

// untilDeadline is how long after now deadline d falls (negative if past).
func untilDeadline(d uint32, now int64) time.Duration {
	return time.Duration(int64(int32(d-tickFloor(now)))<<tickShift - now&(1<<tickShift-1))
}
