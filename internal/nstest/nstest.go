// Package nstest builds throwaway network namespaces and veth pairs for the
// privileged tests of the gateway's I/O packages. Everything it creates is
// removed by t.Cleanup.
package nstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/internal/nsenter"
)

var (
	seq      atomic.Uint32
	sweepOne sync.Once
)

// sweep deletes namespaces left by test processes that died before their
// cleanup ran (a killed or timed-out go test): egt-<pid>-<n> whose pid is gone.
func sweep() {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "egt-")
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			netns.DeleteNamed(e.Name())
		}
	}
}

// Root skips the test unless it runs as root, except under CI=true where a
// missing privilege is a failure.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (CAP_NET_ADMIN, CAP_BPF) and CI=true demands it runs")
	}
	t.Skip("needs root: CAP_NET_ADMIN and CAP_BPF")
}

// NS is a network namespace created for one test.
type NS struct {
	Name   string // the bind mount's name under /var/run/netns; for an anonymous namespace only a label for messages
	Handle netns.NsHandle
	NL     *netlink.Handle
	named  bool
}

// New creates an anonymous namespace with loopback up: it exists only while
// the test holds its handle, so a test that dies leaves nothing behind. Use
// Named where a tool needs a name (ip netns exec) or a CNI runtime's path.
func New(t testing.TB) *NS { return create(t, false) }

// Named creates a namespace with loopback up, bind-mounted at
// /var/run/netns/<Name> (egt-<pid>-<n>; the next test process sweeps those of
// dead processes).
func Named(t testing.TB) *NS { return create(t, true) }

func create(t testing.TB, named bool) *NS {
	t.Helper()
	Root(t)
	name := fmt.Sprintf("egt-%d-%d", os.Getpid(), seq.Add(1))
	if named {
		sweepOne.Do(sweep)
	} else {
		name = "anon-" + name
	}
	h, err := enterNew(name, named)
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	drop := func() {
		h.Close()
		if named {
			netns.DeleteNamed(name)
		}
	}
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		drop()
		t.Fatalf("netlink handle in %s: %v", name, err)
	}
	ns := &NS{Name: name, Handle: h, NL: nl, named: named}
	t.Cleanup(func() {
		nl.Close()
		drop()
	})
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("loopback up in %s: %v", name, err)
	}
	return ns
}

// enterNew makes a namespace, bind-mounted under name if named.
// netns.New(Named) moves the calling thread into it; nsenter.Do brings the
// thread back to the host namespace (where every unlocked thread is)
// afterwards. Discarding the thread instead would kill the children it
// started with Pdeathsig, like kubetest's etcd.
func enterNew(name string, named bool) (netns.NsHandle, error) {
	host, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	defer host.Close()
	var h netns.NsHandle
	err = nsenter.Do(host, func() error {
		var err error
		if named {
			h, err = netns.NewNamed(name)
		} else {
			h, err = netns.New()
		}
		return err
	})
	return h, err
}

// Path is the namespace's bind mount, as CNI runtimes pass it; for an
// anonymous namespace, its handle under /proc (valid while the test runs).
func (ns *NS) Path() string {
	if ns.named {
		return "/var/run/netns/" + ns.Name
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns.Handle))
}

// Do runs fn on a thread switched into the namespace (see nsenter.Do).
func (ns *NS) Do(fn func() error) error { return nsenter.Do(ns.Handle, fn) }

// Enter locks the calling goroutine to its thread and moves it into the
// namespace for the rest of the test (or benchmark). Use it from the test
// goroutine only.
func (ns *NS) Enter(t testing.TB) {
	t.Helper()
	leave, err := nsenter.Enter(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := leave(); err != nil {
			t.Error(err)
		}
	})
}

// Pair creates two namespaces joined by a veth pair: end an (address ap) in
// the first, bn (address bp) in the second. The ends' NS fields are the
// namespaces. This is the shape most data-plane tests need: the device under
// test and one peer that sends and receives its traffic.
func Pair(t testing.TB, an string, ap netip.Prefix, bn string, bp netip.Prefix) (*Veth, *Veth) {
	t.Helper()
	return VethPair(t, New(t), an, ap, New(t), bn, bp)
}

// Veth is one end of a veth pair.
type Veth struct {
	NS    *NS
	Name  string
	Index int
	MAC   net.HardwareAddr
	Addr  netip.Prefix
}

// VethPair connects a and b with a veth pair named an/bn, addresses them
// (invalid prefixes are skipped) and brings both ends up.
func VethPair(t testing.TB, a *NS, an string, ap netip.Prefix, b *NS, bn string, bp netip.Prefix) (*Veth, *Veth) {
	t.Helper()
	la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: an}, PeerName: bn}
	if err := a.NL.LinkAdd(la); err != nil {
		t.Fatalf("add veth %s/%s: %v", an, bn, err)
	}
	peer, err := a.NL.LinkByName(bn)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.NL.LinkSetNsFd(peer, int(b.Handle)); err != nil {
		t.Fatalf("move %s to %s: %v", bn, b.Name, err)
	}
	return setup(t, a, an, ap), setup(t, b, bn, bp)
}

func setup(t testing.TB, ns *NS, name string, p netip.Prefix) *Veth {
	t.Helper()
	if p.IsValid() {
		ns.AddAddr(t, name, p)
	}
	l, err := ns.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.NL.LinkSetUp(l); err != nil {
		t.Fatalf("up %s: %v", name, err)
	}
	l, _ = ns.NL.LinkByName(name)
	return &Veth{NS: ns, Name: name, Index: l.Attrs().Index, MAC: l.Attrs().HardwareAddr, Addr: p}
}

// AddAddr adds prefixes ps to interface name (IPv6 without DAD, so usable
// at once).
func (ns *NS) AddAddr(t testing.TB, name string, ps ...netip.Prefix) {
	t.Helper()
	l, err := ns.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		addr := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := ns.NL.AddrAdd(l, addr); err != nil {
			t.Fatalf("address %s on %s: %v", p, name, err)
		}
	}
}

// AddRoute routes dst via gateway via out of interface name; a /0 dst
// (0.0.0.0/0, ::/0) is the default route.
func (ns *NS) AddRoute(t testing.TB, name string, dst netip.Prefix, via netip.Addr) *netlink.Route {
	t.Helper()
	l, err := ns.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(dst), Gw: via.AsSlice()}
	if err := ns.NL.RouteAdd(r); err != nil {
		t.Fatalf("route %s via %s dev %s: %v", dst, via, name, err)
	}
	return r
}

// DefaultVia adds a default route via each gateway out of interface name.
func (ns *NS) DefaultVia(t testing.TB, name string, gws ...netip.Addr) {
	t.Helper()
	for _, g := range gws {
		zero := netip.IPv4Unspecified()
		if g.Is6() {
			zero = netip.IPv6Unspecified()
		}
		ns.AddRoute(t, name, netip.PrefixFrom(zero, 0), g)
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// AddNeigh adds a permanent neighbour entry ip → mac on interface name.
func (ns *NS) AddNeigh(t testing.TB, name string, ip netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	l, err := ns.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	n := &netlink.Neigh{LinkIndex: l.Attrs().Index, IP: ip.AsSlice(), HardwareAddr: mac, State: netlink.NUD_PERMANENT}
	if ip.Is4() {
		n.Family = netlink.FAMILY_V4
	} else {
		n.Family = netlink.FAMILY_V6
	}
	if err := ns.NL.NeighSet(n); err != nil {
		t.Fatalf("neighbour %s on %s: %v", ip, name, err)
	}
}

// Addrs lists the addresses on interface name, with their prefix lengths.
func (ns *NS) Addrs(t testing.TB, name string) []netip.Prefix {
	t.Helper()
	l, err := ns.NL.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ns.NL.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	var ps []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil {
			continue
		}
		ones, _ := a.Mask.Size()
		ps = append(ps, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return ps
}

// HasAddr reports whether interface name carries address a, whatever its
// prefix length.
func (ns *NS) HasAddr(t testing.TB, name string, a netip.Addr) bool {
	t.Helper()
	for _, p := range ns.Addrs(t, name) {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// Routed is a gateway namespace with two links, the shape of the tests of the
// gateway's kernel-facing packages (address claims, the route cache):
//
//	peer ─pe0──gw0─ GW ─gw1──r0─ router
//
// gw0/pe0 carry 10.66.0.0/24 and fd66::/64, gw1/r0 carry 10.67.0.0/24, and GW
// routes RoutedFar (192.0.2.0/24) via the router.
type Routed struct {
	GW, Peer, Router  *NS
	GW0, PE0, GW1, R0 *Veth
}

// Addresses of a Routed topology.
var (
	RoutedGW0  = netip.MustParsePrefix("10.66.0.1/24")
	RoutedPE0  = netip.MustParsePrefix("10.66.0.2/24")
	RoutedGW06 = netip.MustParsePrefix("fd66::1/64")
	RoutedPE06 = netip.MustParsePrefix("fd66::2/64")
	RoutedGW1  = netip.MustParsePrefix("10.67.0.1/24")
	RoutedR0   = netip.MustParsePrefix("10.67.0.2/24")
	RoutedFar  = netip.MustParsePrefix("192.0.2.0/24")
)

// NewRouted builds a Routed topology.
func NewRouted(t testing.TB) *Routed {
	t.Helper()
	r := &Routed{GW: New(t), Peer: New(t), Router: New(t)}
	r.GW0, r.PE0 = VethPair(t, r.GW, "gw0", RoutedGW0, r.Peer, "pe0", RoutedPE0)
	r.GW1, r.R0 = VethPair(t, r.GW, "gw1", RoutedGW1, r.Router, "r0", RoutedR0)
	r.GW.AddAddr(t, "gw0", RoutedGW06)
	r.Peer.AddAddr(t, "pe0", RoutedPE06)
	r.GW.AddRoute(t, "gw1", RoutedFar, RoutedR0.Addr())
	return r
}

// Eventually polls cond until it holds and returns how long that took; it
// fails the test when cond still does not hold after within, or as soon as
// the test has failed elsewhere (a goroutine's t.Error). With Until,
// UntilEvery, Soon and Poll, it is the one place the tests poll: for state only the kernel or
// another process holds (links, routes, sockets, a child's output or
// metrics, an API server), where there is no event to wait on. In-process
// state should signal instead (a channel, a counter the test waits on, or
// testing/synctest). In a synctest bubble the polling sleeps run the
// bubble's fake clock.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	return Until(t, what, within, func() (bool, string) { return cond(), "" })
}

// Until is Eventually for a condition that also describes the state it
// saw: the failure reports the last description.
func Until(t testing.TB, what string, within time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	return UntilEvery(t, what, within, pollEvery, cond)
}

// UntilEvery is Until polling every every, for a condition that is costly
// to read (it runs a command, or lists a flow table).
func UntilEvery(t testing.TB, what string, within, every time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	if !poll(t, within, max(every, pollEvery), func() bool {
		var ok bool
		ok, last = cond()
		return ok
	}) {
		if last != "" {
			t.Fatalf("%s: not within %v; last state: %s", what, within, last)
		}
		t.Fatalf("%s: not within %v", what, within)
	}
	return time.Since(start)
}

// Soon reports whether cond holds within d, polling it as Eventually does,
// for a test that states its own failure.
func Soon(within time.Duration, cond func() bool) bool { return poll(nil, within, pollEvery, cond) }

// Poll is Soon with a longer interval, for a condition that is costly to
// read (a kubectl run against a real cluster) or that is sampled on
// purpose (state that must stay unchanged for a few looks in a row).
func Poll(within, every time.Duration, cond func() bool) bool {
	return poll(nil, within, max(every, pollEvery), cond)
}

func poll(t testing.TB, within time.Duration, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if t != nil && t.Failed() {
			t.FailNow()
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// pollEvery is Eventually's interval: short against the waits it bounds
// (100 ms and up), long enough not to load the shared test machine.
const pollEvery = 10 * time.Millisecond

// MountSysfs gives the calling thread, locked by Enter, a mount namespace
// of its own with a sysfs of the network namespace it is in, as `ip netns
// exec` does, so that /sys/class/net shows that namespace's devices (a
// thread moved by setns alone still sees those of the namespace /sys was
// mounted in). The cleanup moves the thread back to its mount namespace;
// call it after Enter, so that it runs before Enter's.
func MountSysfs(t testing.TB) {
	t.Helper()
	orig, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		unix.Close(orig)
		t.Fatalf("unshare the mount namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Setns(orig, unix.CLONE_NEWNS); err != nil {
			t.Errorf("back to the mount namespace: %v", err)
		}
		unix.Close(orig)
	})
	// Slave: nothing mounted here propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
		t.Fatal(err)
	}
}
