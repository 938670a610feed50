package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/gateway/nic"
)

// busyPollFlags are `egret gateway`'s busy-poll mode and AF_XDP transmit
// budget (docs/gateway.md#busy-polling).
type busyPollFlags struct {
	on          bool
	usecs       int
	budget      int
	deferIRQs   int
	groFlush    time.Duration
	cpus        string
	sysfs       string
	nap         time.Duration
	txSkbBudget int
	set         map[string]bool // the busy-poll-* flags given on the command line
}

func (b *busyPollFlags) bind(fs *flag.FlagSet) {
	d := nic.DefaultBusyPoll
	fs.BoolVar(&b.on, "busy-poll", false, "busy-poll every AF_XDP socket: each worker drives its queue's NAPI itself and never sleeps, so it keeps a core 100 % busy; for dedicated cores only (needs AF_XDP and a sysfs of the gateway's network namespace; docs/gateway.md#busy-polling)")
	fs.IntVar(&b.usecs, "busy-poll-usecs", d.Usecs, "with --busy-poll: SO_BUSY_POLL, µs one receive or send call may poll the device (1–1000)")
	fs.IntVar(&b.budget, "busy-poll-budget", d.Budget, "with --busy-poll: SO_BUSY_POLL_BUDGET, frames one poll of the device may handle (1–1024)")
	fs.IntVar(&b.deferIRQs, "busy-poll-napi-defer-hard-irqs", d.DeferHardIRQs, "with --busy-poll: the interfaces' napi_defer_hard_irqs while the gateway runs (1–1000; put back on exit)")
	fs.DurationVar(&b.groFlush, "busy-poll-gro-flush-timeout", d.GROFlushTimeout, "with --busy-poll: the interfaces' gro_flush_timeout while the gateway runs, how long the kernel leaves the device to the worker before it polls it itself (1µs–100ms; put back on exit)")
	fs.StringVar(&b.cpus, "busy-poll-cpus", "", "with --busy-poll: comma-separated CPUs, one per queue: worker q runs on the q-th, and the process' other threads are kept off them; empty: no pinning")
	fs.StringVar(&b.sysfs, "busy-poll-sysfs", "/sys", "with --busy-poll: where the node's sysfs is mounted writable, for the interfaces' NAPI settings (a container's own /sys is read-only: mount the host's /sys elsewhere, e.g. /host/sys)")
	fs.DurationVar(&b.nap, "busy-poll-nap", 0, "with --busy-poll: a worker that found nothing sleeps this long instead of yielding and spinning on (0–gro_flush_timeout; 0: spin): for a core it does not have alone, e.g. a SCHED_FIFO worker, which the kernel throttles after 95 % of each second")
	fs.IntVar(&b.txSkbBudget, "xdp-tx-skb-budget", 0, "XDP_MAX_TX_SKB_BUDGET of the AF_XDP sockets: frames one transmit call hands to a copy-mode driver (32–2048; 0: the kernel's 32); a kernel without it (before 6.17) is logged, not an error")
}

// check refuses bad values, and busy-poll knobs given without --busy-poll.
func (b *busyPollFlags) check(fs *flag.FlagSet, mode string) error {
	b.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		if strings.HasPrefix(fl.Name, "busy-poll-") {
			b.set[fl.Name] = true
		}
	})
	if b.txSkbBudget != 0 && (b.txSkbBudget < 32 || b.txSkbBudget > 2048) {
		return fmt.Errorf("--xdp-tx-skb-budget %d: use 32–2048 (the TX ring's size), or 0 for the kernel's", b.txSkbBudget)
	}
	if !b.on {
		for name := range b.set {
			return fmt.Errorf("--%s needs --busy-poll", name)
		}
		return nil
	}
	switch {
	case mode == "afpacket":
		return errors.New("--busy-poll needs AF_XDP sockets: not with --mode afpacket")
	case b.usecs < 1 || b.usecs > 1000:
		return fmt.Errorf("--busy-poll-usecs %d: use 1–1000", b.usecs)
	case b.budget < 1 || b.budget > 1024:
		return fmt.Errorf("--busy-poll-budget %d: use 1–1024", b.budget)
	case b.deferIRQs < 1 || b.deferIRQs > 1000:
		return fmt.Errorf("--busy-poll-napi-defer-hard-irqs %d: use 1–1000 (0 would turn interrupts back on after every poll)", b.deferIRQs)
	case b.groFlush < time.Microsecond || b.groFlush > 100*time.Millisecond:
		return fmt.Errorf("--busy-poll-gro-flush-timeout %v: use 1µs–100ms", b.groFlush)
	}
	if b.nap < 0 || b.nap >= b.groFlush {
		return fmt.Errorf("--busy-poll-nap %v: use 0 up to below --busy-poll-gro-flush-timeout (%v): the kernel takes the device back after that", b.nap, b.groFlush)
	}
	if !filepath.IsAbs(b.sysfs) {
		return fmt.Errorf("--busy-poll-sysfs %q: give an absolute path", b.sysfs)
	}
	_, err := parseCPUs(b.cpus)
	return err
}

// options are the engine's busy-poll settings (off without --busy-poll).
func (b *busyPollFlags) options() (nic.BusyPoll, []int, time.Duration) {
	if !b.on {
		return nic.BusyPoll{}, nil, 0
	}
	cpus, _ := parseCPUs(b.cpus) // checked by check
	return nic.BusyPoll{Usecs: b.usecs, Budget: b.budget, DeferHardIRQs: b.deferIRQs, GROFlushTimeout: b.groFlush, Sysfs: b.sysfs}, cpus, b.nap
}

// parseCPUs parses --busy-poll-cpus: "" is none.
func parseCPUs(v string) ([]int, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, s := range strings.Split(v, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 0 || c > 4095 {
			return nil, fmt.Errorf("--busy-poll-cpus %q: %q is not a CPU number", v, s)
		}
		if seen[c] {
			return nil, fmt.Errorf("--busy-poll-cpus %q: CPU %d twice (one worker per core)", v, c)
		}
		seen[c] = true
		out = append(out, c)
	}
	return out, nil
}
