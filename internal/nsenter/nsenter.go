// Package nsenter runs code inside a network namespace on a locked OS thread.
//
// A network namespace belongs to a thread, not to a goroutine, so entering one
// means locking the goroutine to its thread, switching the thread, and
// switching it back before anything else may run there. When switching back
// fails the thread must not return to the scheduler: it stays locked, and the
// runtime discards it when its goroutine ends. That is a last resort, not a
// shortcut: a discarded thread also kills the children it started with
// Pdeathsig.
package nsenter

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// errGoexit is Do's result when fn ends its goroutine (runtime.Goexit, or
// t.FailNow in a test) instead of returning.
var errGoexit = errors.New("the function run in the network namespace did not return")

// Do runs fn on a goroutine of its own whose thread is switched into ns, and
// waits for it. Sockets and netlink handles fn opens there keep belonging to
// ns, and processes it starts inherit ns. A closed handle (netns.None()) means
// the caller's own namespace: fn then runs directly on the calling goroutine.
//
// The goroutine is fresh so that a thread stuck in ns (switching back failed)
// ends with it, instead of with a caller that would go on running in ns.
func Do(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		err := errGoexit
		defer func() { errc <- err }()
		err = run(ns, fn)
	}()
	return <-errc
}

// run enters ns on the calling goroutine's thread, runs fn and leaves, also
// when fn ends the goroutine.
func run(ns netns.NsHandle, fn func() error) (err error) {
	leave, err := Enter(ns)
	if err != nil {
		return err
	}
	defer func() {
		if lerr := leave(); lerr != nil {
			err = errors.Join(err, lerr)
		}
	}()
	return fn()
}

// Enter locks the calling goroutine to its thread and switches the thread
// into ns until leave is called. leave switches the thread back and unlocks
// it; when it cannot switch back it keeps the thread locked, so the runtime
// discards the thread when the goroutine ends, and reports the error. Prefer
// Do; Enter is for a goroutine that must itself stay in ns, like a test that
// runs in a namespace from start to end.
func Enter(ns netns.NsHandle) (leave func() error, err error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("read the current network namespace: %w", err)
	}
	if err := netns.Set(ns); err != nil {
		orig.Close()
		runtime.UnlockOSThread() // setns failed: the thread is where it was
		return nil, fmt.Errorf("enter the network namespace: %w", err)
	}
	return func() error {
		defer orig.Close()
		if err := netns.Set(orig); err != nil {
			return fmt.Errorf("return from the network namespace: %w", err)
		}
		runtime.UnlockOSThread()
		return nil
	}, nil
}
