package nsenter_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/internal/nsenter"
	"github.com/egret-gw/egret/internal/nstest"
)

// current is the namespace of the calling goroutine's thread, read on a
// locked thread so the answer is about one thread.
func current(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// runsIn reports whether nsenter.Do(target, fn) runs fn in namespace want.
func runsIn(t *testing.T, target, want netns.NsHandle) bool {
	t.Helper()
	var inside bool
	if err := nsenter.Do(target, func() error {
		h, err := netns.Get()
		if err != nil {
			return err
		}
		defer h.Close()
		inside = h.Equal(want)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return inside
}

func TestDoRunsInNamespace(t *testing.T) {
	ns := nstest.New(t)
	host := current(t)
	if !runsIn(t, ns.Handle, ns.Handle) {
		t.Error("fn did not run in the namespace")
	}
	if now := current(t); !now.Equal(host) {
		t.Error("the caller's thread was left in another namespace")
	}
}

func TestDoReturnsFnError(t *testing.T) {
	ns := nstest.New(t)
	want := errors.New("boom")
	if err := nsenter.Do(ns.Handle, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Do = %v, want %v", err, want)
	}
}

// A function that ends its goroutine (t.FailNow in a test) must not leave
// Do waiting forever.
func TestDoSurvivesGoexit(t *testing.T) {
	ns := nstest.New(t)
	if err := nsenter.Do(ns.Handle, func() error { runtime.Goexit(); return nil }); err == nil {
		t.Error("Do after Goexit returned nil")
	}
}

// netns.None() means the caller's own namespace: fn runs on the caller's
// goroutine, which may itself be locked into a namespace.
func TestDoNoneRunsDirectly(t *testing.T) {
	ns := nstest.New(t)
	ns.Enter(t)
	if !runsIn(t, netns.None(), ns.Handle) {
		t.Error("fn did not run in the caller's namespace")
	}
}

func TestEnterLeave(t *testing.T) {
	ns := nstest.New(t)
	host := current(t)
	runtime.LockOSThread() // keep the check below on the thread Enter switched
	defer runtime.UnlockOSThread()
	leave, err := nsenter.Enter(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	in := h.Equal(ns.Handle)
	h.Close()
	if err := leave(); err != nil {
		t.Fatal(err)
	}
	if !in {
		t.Error("Enter did not switch the thread into the namespace")
	}
	h, err = netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.Equal(host) {
		t.Error("leave did not return the thread to its namespace")
	}
}

func TestEnterBadHandle(t *testing.T) {
	nstest.Root(t)
	if _, err := nsenter.Enter(netns.NsHandle(1 << 20)); err == nil {
		t.Fatal("Enter of a closed descriptor succeeded")
	}
}
