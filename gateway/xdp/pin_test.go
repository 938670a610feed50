package xdp_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/xdptest"
)

// pinDir is where the loader pins gw0's link and counters (pin.go): the
// test thread is in the gateway namespace (newLab).
func (l *lab) pinDir(t *testing.T) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return xdp.PinDir(xdp.DefaultPinDir, st.Ino, l.gwEnd.Index)
}

// dialEgress opens a TCP connection from the peer to the egress IP, on a
// port nothing listens on: the kernel, if it sees the SYN, refuses it (RST).
func (l *lab) dialEgress(t *testing.T, timeout time.Duration) error {
	t.Helper()
	var derr error
	err := l.peer.Do(func() error {
		c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(egress, 2222).String(), timeout)
		if err == nil {
			c.Close()
		}
		derr = err
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return derr
}

// TestHoldAcrossRestart is a graceful restart of the program: held and
// closed, it stays attached and drops what it would steer, so the kernel,
// which carries the egress IP, never answers it (no RST); the next program
// takes the same link over with its sockets ready; a final Detach leaves
// no program and no pin.
func TestHoldAcrossRestart(t *testing.T) {
	l := newLab(t)
	l.gw.AddAddr(t, "gw0", netip.PrefixFrom(egress, 32))
	dir := l.pinDir(t)
	// The probe can fail: without Egret the kernel refuses the connection.
	if err := l.dialEgress(t, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("without XDP: dial %v: %v, want connection refused", egress, err)
	}

	p1, err := xdp.Load(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.openSocket(p1)
	if err := p1.AddEgressIP(egress); err != nil {
		t.Fatal(err)
	}
	if err := p1.Attach(); err != nil {
		t.Fatal(err)
	}
	l.sendUDP(netip.AddrPortFrom(egress, 9), []byte("first-run"))
	l.expectOnSocket([]byte("first-run"))
	linkID := xdptest.LinkID(t, dir)
	if linkID == 0 {
		t.Fatal("no link pinned after Attach")
	}

	// Graceful stop: hold, close the socket, release the descriptors.
	if err := p1.Hold(time.Minute); err != nil {
		t.Fatal(err)
	}
	l.sock.Close()
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	if on, _ := attached(t, l); !on {
		t.Fatal("no program on gw0 after a held Close")
	}
	before := xdptest.Held(t, dir)
	err = l.dialEgress(t, 500*time.Millisecond)
	if errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatal("during the hold the kernel refused a connection to the egress IP: the SYN reached it")
	}
	if after := xdptest.Held(t, dir); after <= before {
		t.Fatalf("held drops %d -> %d: the SYN was not dropped in XDP (dial: %v)", before, after, err)
	}

	// The next run: loaded, socket in, maps filled, then swapped in.
	p2, err := xdp.Load(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.openSocket(p2)
	if err := p2.AddEgressIP(egress); err != nil {
		t.Fatal(err)
	}
	if err := p2.Attach(); err != nil {
		t.Fatal(err)
	}
	if id := xdptest.LinkID(t, dir); id != linkID {
		t.Fatalf("pinned link %d after the takeover, want the same link %d (updated in place, never detached)", id, linkID)
	}
	l.sendUDP(netip.AddrPortFrom(egress, 9), []byte("second-run"))
	l.expectOnSocket([]byte("second-run"))
	if s, err := p2.Stats(); err != nil || s.Held != 0 {
		t.Fatalf("new program's counters %+v, %v: want its own, fresh", s, err)
	}

	if err := p2.Detach(); err != nil {
		t.Fatal(err)
	}
	if on, id := attached(t, l); on {
		t.Fatalf("program %d still attached after Detach", id)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory %s left after Detach: %v", dir, err)
	}
	if err := l.dialEgress(t, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after Detach: dial %v: %v, want the kernel's refusal again", egress, err)
	}
}

// TestHoldExpires: a hold has a deadline; past it the program passes what
// it has no socket for, as after a crash.
func TestHoldExpires(t *testing.T) {
	l := newLab(t)
	l.gw.AddAddr(t, "gw0", netip.PrefixFrom(egress, 32))
	p, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Detach() })
	if err := p.AddEgressIP(egress); err != nil {
		t.Fatal(err)
	}
	if err := p.Hold(-time.Second); err != nil { // a deadline already past
		t.Fatal(err)
	}
	if err := l.dialEgress(t, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("past the hold: dial %v: %v, want the kernel's refusal", egress, err)
	}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Held != 0 || s.NoSocket == 0 {
		t.Fatalf("counters %+v: want no held drop and the SYN passed without a socket", s)
	}
}

// foreignLink attaches a program that is not Egret's to ifindex through a
// link pinned at path, and lets go of it: only the pin holds it.
func foreignLink(t *testing.T, ifindex int, path string) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "other_xdp", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: link.XDPGenericMode})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := lk.Pin(path); err != nil {
		t.Fatal(err)
	}
}

// TestStalePinReplaced: a pin at the interface's path that is not an
// Egret program on this interface is dropped, not updated; an Egret link
// pinned where earlier builds pinned it is taken over and moved.
func TestStalePinReplaced(t *testing.T) {
	l := newLab(t)
	dir := l.pinDir(t)
	lo, err := l.gw.NL.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		ifindex int
	}{{"another interface", lo.Attrs().Index}, {"another program", l.gwEnd.Index}} {
		foreignLink(t, c.ifindex, filepath.Join(dir, "link"))
		p, err := attach(l.gwEnd.Index, xdp.Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, id := attached(t, l); id == 0 {
			t.Fatalf("%s: nothing on gw0", c.name)
		} else if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err != nil {
			t.Fatal(err)
		} else if info, err := prog.Info(); err != nil || info.Name != xdp.ProgramName {
			prog.Close()
			t.Fatalf("%s: gw0 runs %+v (%v), want %s", c.name, info, err, xdp.ProgramName)
		} else {
			prog.Close()
		}
		if lx := lo.Attrs().Index; c.ifindex == lx {
			// Unpinned, the link is freed asynchronously.
			if !nstest.Soon(5*time.Second, func() bool {
				x, _ := l.gw.NL.LinkByIndex(lx)
				return x.Attrs().Xdp == nil || !x.Attrs().Xdp.Attached
			}) {
				t.Fatalf("%s: the stale link still runs on lo 5 s after it was dropped", c.name)
			}
		}
		if err := p.Detach(); err != nil {
			t.Fatal(err)
		}
	}

	// An Egret link where builds before the pin directory pinned it.
	p1, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := xdptest.LinkID(t, dir)
	legacy := filepath.Join(filepath.Dir(dir), "link-"+filepath.Base(dir))
	if err := os.Rename(filepath.Join(dir, "link"), legacy); err != nil {
		t.Fatal(err)
	}
	p1.Close()
	p2, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Detach()
	if got := xdptest.LinkID(t, dir); got != id {
		t.Fatalf("link %d pinned after taking over the legacy pin, want %d", got, id)
	}
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy pin %s still there: %v", legacy, err)
	}
}

// attach is Load then Attach, for tests with nothing to fill first.
func attach(ifindex int, opts xdp.Options) (*xdp.Program, error) {
	p, err := xdp.Load(ifindex, opts)
	if err != nil {
		return nil, err
	}
	if err := p.Attach(); err != nil {
		p.Detach()
		return nil, err
	}
	return p, nil
}

// TestUnattachedDetachDropsHeldProgram: a start that loads a program but
// never attaches it (it fails, or falls back to AF_PACKET) and detaches
// does not leave the previous run's held program keeping the interface's
// traffic from the kernel.
func TestUnattachedDetachDropsHeldProgram(t *testing.T) {
	l := newLab(t)
	dir := l.pinDir(t)
	p1, err := attach(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Hold(time.Minute); err != nil {
		t.Fatal(err)
	}
	p1.Close()
	p2, err := xdp.Load(l.gwEnd.Index, xdp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if on, _ := attached(t, l); !on {
		t.Fatal("the held program is gone before the test")
	}
	if err := p2.Detach(); err != nil {
		t.Fatal(err)
	}
	// The kernel frees an unpinned link asynchronously.
	var id uint32
	if !nstest.Soon(5*time.Second, func() bool { var on bool; on, id = attached(t, l); return !on }) {
		t.Fatalf("program %d still on gw0 5 s after the new run gave up", id)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory %s left: %v", dir, err)
	}
}

// TestPinDirMountedDirectory is the DaemonSet's shape: only the host's
// /sys/fs/bpf/egret is mounted into the container, elsewhere (--pin-dir).
// The loader pins there, into the host's bpffs, and mounts none of its own
// (it cannot in the pod, without SYS_ADMIN).
func TestPinDirMountedDirectory(t *testing.T) {
	l := newLab(t)
	host := filepath.Join("/sys/fs/bpf", fmt.Sprintf("egret-pindir-test-%d", os.Getpid()))
	if err := os.Mkdir(host, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	mnt := filepath.Join(t.TempDir(), "egret-bpf")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(host, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", host, err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	parent := filepath.Dir(mnt)
	t.Cleanup(func() {
		var fs unix.Statfs_t
		if unix.Statfs(parent, &fs) == nil && fs.Type == unix.BPF_FS_MAGIC {
			unix.Unmount(parent, unix.MNT_DETACH)
		}
	})

	p, err := attach(l.gwEnd.Index, xdp.Options{PinDir: mnt})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(xdp.PinDir(host, st.Ino, l.gwEnd.Index), "link")); err != nil {
		t.Errorf("the link is not pinned in the host's directory: %v", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(parent, &fs); err == nil && fs.Type == unix.BPF_FS_MAGIC {
		t.Errorf("the loader mounted a bpffs of its own on %s", parent)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
}

// TestPinNames: the pin directory has the name docs/io.md gives operators,
// and NamespacePins finds a namespace's directories and legacy link pins,
// not another namespace's.
func TestPinNames(t *testing.T) {
	if got := xdp.PinDir("/sys/fs/bpf/egret", 4026531840, 2); got != "/sys/fs/bpf/egret/ns4026531840-if2" {
		t.Errorf("PinDir = %s", got)
	}
	root := t.TempDir()
	for _, name := range []string{"ns7-if2/", "ns7-if13/", "link-ns7-if4", "ns77-if2/", "ns8-if7/", "link-ns70-if1"} {
		var err error
		if dir, ok := strings.CutSuffix(name, "/"); ok {
			err = os.Mkdir(filepath.Join(root, dir), 0o700)
		} else {
			err = os.WriteFile(filepath.Join(root, name), nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got := xdp.NamespacePins(root, 7)
	for i := range got {
		got[i] = filepath.Base(got[i])
	}
	slices.Sort(got)
	if want := []string{"link-ns7-if4", "ns7-if13", "ns7-if2"}; !slices.Equal(got, want) {
		t.Errorf("NamespacePins(7) = %v, want %v", got, want)
	}
}
