package main

import (
	"slices"
	"sync"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
)

// Point is one step of the convergence: at T seconds after the controller
// started, Assigned objects had every egress IP in their status.
type Point struct {
	T        float64 `json:"t_s"`
	Assigned int     `json:"assigned"`
}

// tracker follows the EgressIP objects as a watch delivers them and keeps,
// for each, where its egress IPs are according to its status: the
// benchmark's view of what the controller has written.
type tracker struct {
	mu       sync.Mutex
	start    time.Time                    // the controller's start; zero before it
	where    map[string]map[string]string // object → egress IP → node
	complete map[string]bool              // every spec IP has a node
	curve    []Point
	waiters  []*waiter
}

// waiter is a condition on one object's status someone waits for.
type waiter struct {
	name string
	ok   func(where map[string]string) bool
	done chan time.Time
}

func newTracker() *tracker {
	return &tracker{where: map[string]map[string]string{}, complete: map[string]bool{}}
}

// started marks the controller's start: the convergence curve counts from it.
func (t *tracker) started(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start = at
	t.curve = append(t.curve, Point{T: 0, Assigned: t.countLocked()})
}

// observe records e as the watch delivered it at time at.
func (t *tracker) observe(e *egressv1.EgressIP, at time.Time) {
	w := map[string]string{}
	for _, it := range e.Status.Items {
		w[it.EgressIP] = it.Node
	}
	full := len(e.Spec.EgressIPs) > 0
	for _, ip := range e.Spec.EgressIPs {
		if w[ip] == "" {
			full = false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.where[e.Name] = w
	if full != t.complete[e.Name] {
		t.complete[e.Name] = full
		if !t.start.IsZero() {
			t.curve = append(t.curve, Point{T: at.Sub(t.start).Seconds(), Assigned: t.countLocked()})
		}
	}
	t.waiters = slices.DeleteFunc(t.waiters, func(wt *waiter) bool {
		if wt.name != e.Name || !wt.ok(w) {
			return false
		}
		wt.done <- at
		return true
	})
}

func (t *tracker) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.where, name)
	delete(t.complete, name)
}

func (t *tracker) countLocked() int {
	n := 0
	for _, ok := range t.complete {
		if ok {
			n++
		}
	}
	return n
}

// assigned is how many objects have every egress IP placed.
func (t *tracker) assigned() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.countLocked()
}

// on returns the egress IPs the status places on node, by object.
func (t *tracker) on(node string) map[string][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]string{}
	for name, w := range t.where {
		for ip, n := range w {
			if n == node {
				out[name] = append(out[name], ip)
			}
		}
	}
	return out
}

// hosted counts the egress IPs placed on each node.
func (t *tracker) hosted() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for _, w := range t.where {
		for _, n := range w {
			out[n]++
		}
	}
	return out
}

// wait returns a channel that receives the time at which object name's
// status satisfies ok (at once if it already does).
func (t *tracker) wait(name string, ok func(where map[string]string) bool) <-chan time.Time {
	wt := &waiter{name: name, ok: ok, done: make(chan time.Time, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, known := t.where[name]; known && ok(w) {
		wt.done <- time.Now()
		return wt.done
	}
	t.waiters = append(t.waiters, wt)
	return wt.done
}

// convergence returns the curve so far.
func (t *tracker) convergence() []Point {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.curve)
}
