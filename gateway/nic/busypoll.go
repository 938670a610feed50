package nic

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BusyPoll is the busy-poll mode of an AF_XDP socket and its interface,
// for a worker that owns a core: the worker drives the device's NAPI
// itself from recvfrom/sendto (SO_PREFER_BUSY_POLL), and the device's
// interrupts stay deferred (napi_defer_hard_irqs, gro_flush_timeout)
// while it does, so receive never waits for a softirq to be scheduled.
// The zero value is off. Documentation/networking/napi.rst ("busy
// polling") and af_xdp.rst describe the knobs.
type BusyPoll struct {
	// Usecs is SO_BUSY_POLL: how long one recvfrom/sendto may poll the
	// device for work (µs); 0 turns the mode off.
	Usecs int
	// Budget is SO_BUSY_POLL_BUDGET: frames one NAPI poll may handle.
	Budget int
	// DeferHardIRQs is the interface's napi_defer_hard_irqs: how many
	// empty polls pass before interrupts are enabled again.
	DeferHardIRQs int
	// GROFlushTimeout is the interface's gro_flush_timeout: how long the
	// kernel waits, with interrupts off, before it polls the device itself
	// (a worker that stops polling is covered after this long).
	GROFlushTimeout time.Duration
	// Sysfs is where the network namespace's sysfs is mounted ("" is
	// /sys): a container whose /sys is read-only mounts the host's
	// elsewhere, writable.
	Sysfs string
}

// DefaultBusyPoll are the values the kernel's and DPDK's AF_XDP guides use.
var DefaultBusyPoll = BusyPoll{Usecs: 20, Budget: 64, DeferHardIRQs: 2, GROFlushTimeout: 200 * time.Microsecond}

// On reports whether the mode is on.
func (b BusyPoll) On() bool { return b.Usecs > 0 }

// Check refuses values the kernel would refuse or that make no sense for a
// busy-polling worker; the zero value (off) passes.
func (b BusyPoll) Check() error {
	if !b.On() {
		if b != (BusyPoll{Sysfs: b.Sysfs}) {
			return errors.New("nic: busy poll: a budget, IRQ deferral or flush timeout without a poll time (µs)")
		}
		return nil
	}
	switch {
	case b.Usecs > 1000:
		return fmt.Errorf("nic: busy poll time %d µs: use 1–1000", b.Usecs)
	case b.Budget < 1 || b.Budget > 1024:
		return fmt.Errorf("nic: busy poll budget %d: use 1–1024 frames", b.Budget)
	case b.DeferHardIRQs < 1 || b.DeferHardIRQs > 1000:
		// 0 would re-enable interrupts after every poll: the mode then
		// only adds polling on top of the interrupt path.
		return fmt.Errorf("nic: napi_defer_hard_irqs %d: use 1–1000", b.DeferHardIRQs)
	case b.GROFlushTimeout < time.Microsecond || b.GROFlushTimeout > 100*time.Millisecond:
		return fmt.Errorf("nic: gro_flush_timeout %v: use 1µs–100ms", b.GROFlushTimeout)
	}
	return nil
}

// ErrBusyPoll marks an AF_XDP socket that could not be put in busy-poll
// mode: the caller asked for the mode, so it should not carry on without.
var ErrBusyPoll = errors.New("nic: busy poll")

// ErrKernelLacks says the running kernel does not have a socket option
// Egret can do without; the *MissingError wrapping it names which.
var ErrKernelLacks = errors.New("nic: the kernel lacks this option")

// MissingError is a socket option the kernel does not know (ENOPROTOOPT).
type MissingError struct {
	Option string // e.g. "XDP_MAX_TX_SKB_BUDGET"
	Since  string // the first kernel that has it
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("nic: the kernel lacks %s (Linux %s and later)", e.Option, e.Since)
}

// Unwrap makes errors.Is(err, ErrKernelLacks) hold.
func (e *MissingError) Unwrap() error { return ErrKernelLacks }

// setBusyPoll sets the socket options of b on x's socket.
func (x *XSK) setBusyPoll(b BusyPoll) error {
	for _, o := range []struct {
		name  string
		opt   int
		val   int
		since string
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1, "5.11"},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, b.Usecs, "3.11"},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, b.Budget, "5.11"},
	} {
		if err := unix.SetsockoptInt(x.fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			if errors.Is(err, unix.ENOPROTOOPT) {
				return fmt.Errorf("%w: %w", ErrBusyPoll, &MissingError{Option: o.name, Since: o.since})
			}
			return fmt.Errorf("%w: set %s to %d: %w", ErrBusyPoll, o.name, o.val, err)
		}
	}
	x.busy = true
	return nil
}

// BusyPollState reads the busy-poll socket options back from the kernel:
// what the socket really runs with. (SO_BUSY_POLL_BUDGET cannot be read
// back: the kernel has no getsockopt for it; setBusyPoll fails if the
// kernel refuses it.)
func (x *XSK) BusyPollState() (prefer bool, usecs int, err error) {
	p, err := unix.GetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL)
	if err != nil {
		return false, 0, fmt.Errorf("nic: read SO_PREFER_BUSY_POLL: %w", err)
	}
	if usecs, err = unix.GetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL); err != nil {
		return false, 0, fmt.Errorf("nic: read SO_BUSY_POLL: %w", err)
	}
	return p != 0, usecs, nil
}

// NAPIID is the NAPI instance the socket's receive queue belongs to
// (SO_INCOMING_NAPI_ID), known once a frame has arrived: what recvfrom and
// sendto poll in busy-poll mode. 0 means there is none to poll: the driver
// registered its XDP receive queue without one (veth does, also with GRO
// and threaded NAPI on).
func (x *XSK) NAPIID() (int, error) {
	id, err := unix.GetsockoptInt(x.fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID)
	if err != nil {
		return 0, fmt.Errorf("nic: read SO_INCOMING_NAPI_ID of %s: %w", x.name, err)
	}
	return id, nil
}

// BusyPolling reports whether the socket is driven by busy polling.
func (x *XSK) BusyPolling() bool { return x.busy }

// setTxSkbBudget sets XDP_MAX_TX_SKB_BUDGET: how many frames one sendto
// hands to the driver in copy mode (the kernel's default is 32, then
// EAGAIN). Kernels before 6.17 lack it: a *MissingError.
func (x *XSK) setTxSkbBudget(n int) error {
	v := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET,
		uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	switch e {
	case 0:
		x.txBudget = n
		return nil
	case unix.ENOPROTOOPT:
		return &MissingError{Option: "XDP_MAX_TX_SKB_BUDGET", Since: "6.17"}
	case unix.EACCES:
		return fmt.Errorf("set XDP_MAX_TX_SKB_BUDGET to %d: the kernel takes 32 up to the TX ring's size: %w", n, e)
	}
	return fmt.Errorf("set XDP_MAX_TX_SKB_BUDGET to %d: %w", n, e)
}

// TxSkbBudget is the XDP_MAX_TX_SKB_BUDGET the socket runs with, and
// whether it was set: 0 and the reason when it was not asked for or the
// kernel refused it (the kernel's default of 32 applies then).
func (x *XSK) TxSkbBudget() (int, error) { return x.txBudget, x.txBudgetErr }

// ZeroCopy reports whether the kernel runs the socket in zero-copy mode
// (XDP_OPTIONS): frames DMA'd straight into the UMEM and sent from it. A
// driver without AF_XDP zero-copy (veth, most virtual NICs) runs copy mode,
// which the kernel picks on its own unless XDPOptions forces one.
func (x *XSK) ZeroCopy() (bool, error) {
	var flags uint32 // struct xdp_options
	n := uint32(unsafe.Sizeof(flags))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_OPTIONS,
		uintptr(unsafe.Pointer(&flags)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		return false, fmt.Errorf("nic: read XDP_OPTIONS of %s: %w", x.name, e)
	}
	return flags&unix.XDP_OPTIONS_ZEROCOPY != 0, nil
}

// napiKnobs are an interface's NAPI settings in sysfs that busy polling
// changes, and the values to put back.
var napiKnobs = []string{"napi_defer_hard_irqs", "gro_flush_timeout"}

// PreferBusyPoll sets the interface's napi_defer_hard_irqs and
// gro_flush_timeout (sysfs) for b and remembers the previous values, which
// Close and Leave put back. It writes only if sysfs shows this very device
// (same ifindex and address): a thread moved into another network
// namespace by setns still sees the sysfs of the one it was mounted in.
func (ifc *Interface) PreferBusyPoll(b BusyPoll) error {
	if !b.On() {
		return nil
	}
	root := b.Sysfs
	if root == "" {
		root = "/sys"
	}
	dir := filepath.Join(root, "class", "net", ifc.Name)
	if err := sameDevice(dir, ifc.Index, ifc.MAC); err != nil {
		return fmt.Errorf("%w: %w", ErrBusyPoll, err)
	}
	vals := map[string]string{
		"napi_defer_hard_irqs": strconv.Itoa(b.DeferHardIRQs),
		"gro_flush_timeout":    strconv.FormatInt(b.GROFlushTimeout.Nanoseconds(), 10),
	}
	for _, k := range napiKnobs {
		p := filepath.Join(dir, k)
		old, err := os.ReadFile(p)
		if err != nil {
			return errors.Join(fmt.Errorf("%w: read %s: %w", ErrBusyPoll, p, err), ifc.restoreNAPI())
		}
		if err := os.WriteFile(p, []byte(vals[k]), 0); err != nil {
			return errors.Join(fmt.Errorf("%w: set %s to %s: %w", ErrBusyPoll, p, vals[k], err), ifc.restoreNAPI())
		}
		ifc.napiSaved = append(ifc.napiSaved, [2]string{p, string(bytes.TrimSpace(old))})
	}
	return nil
}

// restoreNAPI puts the sysfs values PreferBusyPoll changed back, last first.
func (ifc *Interface) restoreNAPI() error {
	var errs []error
	for i := len(ifc.napiSaved) - 1; i >= 0; i-- {
		s := ifc.napiSaved[i]
		if err := os.WriteFile(s[0], []byte(s[1]), 0); err != nil {
			errs = append(errs, fmt.Errorf("nic: restore %s to %s: %w", s[0], s[1], err))
		}
	}
	ifc.napiSaved = nil
	return errors.Join(errs...)
}

// sameDevice checks that the sysfs directory dir is the device with this
// ifindex and hardware address.
func sameDevice(dir string, ifindex int, mac net.HardwareAddr) error {
	idx, err := os.ReadFile(filepath.Join(dir, "ifindex"))
	if err != nil {
		return fmt.Errorf("needs the interface's sysfs directory: %w", err)
	}
	addr, err := os.ReadFile(filepath.Join(dir, "address"))
	if err != nil {
		return fmt.Errorf("needs the interface's sysfs directory: %w", err)
	}
	if trimmed(idx) != strconv.Itoa(ifindex) || trimmed(addr) != mac.String() {
		return fmt.Errorf("%s is another device (ifindex %s, address %s; want %d, %v): /sys was mounted in another network namespace; mount sysfs in this one (ip netns exec does)",
			dir, trimmed(idx), trimmed(addr), ifindex, mac)
	}
	return nil
}

func trimmed(b []byte) string { return string(bytes.TrimSpace(b)) }
