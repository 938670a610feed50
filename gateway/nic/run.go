package nic

import (
	"errors"
	"runtime"
	"time"
)

// Run is a worker's receive loop: on the calling goroutine, locked to its
// OS thread, it receives batches from p and hands each to handle until stop
// is closed. handle transmits (Take + Transmit) or keeps nothing; whatever
// is left in the batch afterwards is released. wait bounds how long one
// receive blocks, hence how late Run notices stop.
func Run(p Queue, stop <-chan struct{}, wait time.Duration, handle func(*Batch)) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var b Batch
	x, _ := p.(*XSK)
	for {
		select {
		case <-stop:
			b.Release()
			return nil
		default:
		}
		if err := p.Receive(&b, wait); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
		if b.N == 0 {
			if x != nil {
				x.Flush() // idle: get transmitted buffers back
			}
			continue
		}
		handle(&b)
		b.Release()
	}
}
