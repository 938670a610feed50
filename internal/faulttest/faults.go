// Package faulttest is the fault-injection core the local cloud API servers
// (ec2test, gcetest, azuretest) share: the log of calls received, throttling
// of the next n requests and queued failures per method. Each server keeps
// its own wire format (the error type E) and its own stale-read model; this
// package only decides which injected answer, if any, a request gets.
package faulttest

import "slices"

// Fault says what Next injected.
type Fault int

// What Next can inject.
const (
	None      Fault = iota // no fault: the server answers normally
	Throttled              // the request is throttled
	Failed                 // a failure queued by Fail for the method
)

// Faults holds the injected faults of one server. It is not safe for
// concurrent use on its own: the server calls it under the lock that also
// guards its state, so a request's fault and its effect are one step.
type Faults[E any] struct {
	calls     []string
	throttle  int
	throttled E
	fail      map[string][]E
}

// Throttle makes the next n requests, whatever their method, answer e.
func (f *Faults[E]) Throttle(n int, e E) { f.throttle, f.throttled = n, e }

// Fail makes the next n calls of method answer e; n = 0 clears what an
// earlier Fail left for it.
func (f *Faults[E]) Fail(method string, e E, n int) {
	if f.fail == nil {
		f.fail = map[string][]E{}
	}
	f.fail[method] = nil
	for range n {
		f.fail[method] = append(f.fail[method], e)
	}
}

// Next records a call of method and returns the answer to inject: the
// throttling answer while requests are throttled, then the failures queued
// for the method in order, else None.
func (f *Faults[E]) Next(method string) (E, Fault) {
	f.calls = append(f.calls, method)
	if f.throttle > 0 {
		f.throttle--
		return f.throttled, Throttled
	}
	if l := f.fail[method]; len(l) > 0 {
		f.fail[method] = l[1:]
		return l[0], Failed
	}
	var zero E
	return zero, None
}

// Calls returns the methods received so far, in order.
func (f *Faults[E]) Calls() []string { return slices.Clone(f.calls) }
