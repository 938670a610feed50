package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The program outlives its process on purpose. Each interface has a pin
// directory in the bpffs, named after the network namespace and the
// interface index (bpffs is shared by all namespaces, interface indexes are
// not), holding:
//
//   - link: the bpf_link that keeps the program attached once the process
//     is gone (a graceful stop that hands over, or a crash);
//   - stats: the program's counters, so the next process (and an operator,
//     with bpftool) can read what the program did meanwhile.
//
// The next process loads its own program and maps, fills them, registers
// its sockets and only then swaps its program into the pinned link
// (link.Update): the interface never runs without an Egret program, and
// the new one steers from its first frame. A final stop (Detach) removes
// the directory.

// pins are the paths of one interface's pins.
type pins struct {
	dir    string // the interface's directory
	link   string
	stats  string
	legacy string // where builds before the directory pinned the link
}

// The names under the pin root of an interface's pin directory, and of the
// link pin of builds before the directories, from the namespace's inode
// and the interface index (docs/io.md).
const (
	pinDirName    = "ns%d-if%d"
	legacyPinName = "link-ns%d-if%d"
)

// PinDir is the pin directory, under root (DefaultPinDir or the gateway's
// --pin-dir), of interface ifindex of the network namespace with inode
// nsIno: its link and stats pins are there, for the next process, an
// operator with bpftool, or a test.
func PinDir(root string, nsIno uint64, ifindex int) string {
	return filepath.Join(root, fmt.Sprintf(pinDirName, nsIno, ifindex))
}

// NamespacePins lists what is pinned under root for the interfaces of the
// network namespace with inode nsIno: their pin directories and legacy
// link pins.
func NamespacePins(root string, nsIno uint64) []string {
	var found []string
	for _, name := range []string{pinDirName, legacyPinName} {
		// The interface index, the name's last verb, is any.
		m, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf(strings.TrimSuffix(name, "%d")+"*", nsIno)))
		found = append(found, m...)
	}
	return found
}

func pinsFor(root string, ifindex int) (pins, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return pins{}, fmt.Errorf("xdp: identify network namespace: %w", err)
	}
	dir := PinDir(root, st.Ino, ifindex)
	return pins{dir: dir, link: filepath.Join(dir, "link"), stats: filepath.Join(dir, "stats"),
		legacy: filepath.Join(root, fmt.Sprintf(legacyPinName, st.Ino, ifindex))}, nil
}

// takeOver swaps the loaded program into a link a previous run pinned,
// and reports whether it did. A pin that is not an XDP link of an Egret
// program on this interface (the interface was recreated, the path holds
// something else) is stale: it is unpinned and dropped, never updated.
func (p *Program) takeOver() bool {
	for _, path := range []string{p.pins.link, p.pins.legacy} {
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				p.log.Warn("xdp: unreadable pin removed", "pin", path, "err", err)
				_ = os.Remove(path)
			}
			continue
		}
		prev, why := p.checkPredecessor(l)
		if why != "" {
			p.log.Warn("xdp: stale pin dropped", "pin", path, "ifindex", p.ifindex, "why", why)
			_ = l.Unpin()
			l.Close()
			p.dropped = true
			continue
		}
		if err := l.Update(p.objs.EgretXdp); err != nil {
			p.log.Warn("xdp: could not replace the program a previous run left; attaching anew", "pin", path, "err", err)
			_ = l.Unpin()
			l.Close()
			p.dropped = true
			continue
		}
		if err := p.pin(l); err != nil {
			// Attached and running, only not pinned: the next start
			// attaches anew after a short detach.
			p.log.Warn("xdp: program not pinned", "err", err)
		}
		p.lnk, p.mode = l, attachedMode(p.ifindex)
		p.log.Info("xdp: took over the program a previous run left attached", "ifindex", p.ifindex, "mode", p.mode.String(),
			"same_version", prev.sameVersion, "held_drops", prev.stats.Held, "passed_without_socket", prev.stats.NoSocket)
		return true
	}
	return false
}

// predecessor is what checkPredecessor learnt of a pinned program.
type predecessor struct {
	sameVersion bool
	stats       Stats // zero unless its counters were pinned and of this version's shape
}

// checkPredecessor says why the pinned link l may not be taken over, or
// "" and what its program is.
func (p *Program) checkPredecessor(l link.Link) (predecessor, string) {
	var prev predecessor
	info, err := l.Info()
	if err != nil {
		return prev, fmt.Sprintf("link info: %v", err)
	}
	if info.Type != link.XDPType {
		return prev, fmt.Sprintf("link of type %d, not XDP", info.Type)
	}
	if x := info.XDP(); x == nil || int(x.Ifindex) != p.ifindex {
		return prev, "attached to another interface (or to one that is gone)"
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return prev, fmt.Sprintf("its program: %v", err)
	}
	defer prog.Close()
	pi, err := prog.Info()
	if err != nil {
		return prev, fmt.Sprintf("its program: %v", err)
	}
	if pi.Name != ProgramName {
		return prev, fmt.Sprintf("runs program %q, not %s", pi.Name, ProgramName)
	}
	if mine, err := p.objs.EgretXdp.Info(); err == nil {
		prev.sameVersion = mine.Tag == pi.Tag
	}
	prev.stats = p.predecessorStats(pi)
	return prev, ""
}

// predecessorStats reads the pinned counters if they are the predecessor
// program's own map and of this version's shape.
func (p *Program) predecessorStats(pi *ebpf.ProgramInfo) Stats {
	m, err := ebpf.LoadPinnedMap(p.pins.stats, nil)
	if err != nil {
		return Stats{}
	}
	defer m.Close()
	mi, err := m.Info()
	if err != nil {
		return Stats{}
	}
	id, ok := mi.ID()
	ids, ok2 := pi.MapIDs()
	if !ok || !ok2 || !slices.Contains(ids, id) || m.Type() != ebpf.PerCPUArray ||
		m.KeySize() != 4 || m.ValueSize() != 8 || m.MaxEntries() != p.objs.Stats.MaxEntries() {
		return Stats{}
	}
	s, err := readStats(m)
	if err != nil {
		return Stats{}
	}
	return s
}

// pin pins l and this program's counters in the interface's directory,
// replacing what is there.
func (p *Program) pin(l link.Link) error {
	// A link taken over is moved from its old pin (a no-op if it is ours).
	if err := l.Pin(p.pins.link); err != nil {
		return fmt.Errorf("xdp: pin link at %s: %w", p.pins.link, err)
	}
	if err := os.Remove(p.pins.stats); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("xdp: replace pinned counters: %w", err)
	}
	if err := p.objs.Stats.Pin(p.pins.stats); err != nil {
		return fmt.Errorf("xdp: pin counters at %s: %w", p.pins.stats, err)
	}
	return nil
}

// dropPinned removes the interface's pins, whatever they hold: the links
// detach once no process holds them.
func (p *Program) dropPinned() error {
	var errs []error
	for _, path := range []string{p.pins.link, p.pins.legacy} {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("xdp: remove pin %s: %w", path, err))
		}
	}
	return errors.Join(append(errs, p.unpinRest())...)
}

// unpinRest removes the counters' pin and the interface's directory once
// the link is unpinned.
func (p *Program) unpinRest() error {
	var errs []error
	if err := os.Remove(p.pins.stats); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := os.Remove(p.pins.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Hold makes the program drop, for the next d, the tunnel and egress
// frames it has no socket for, instead of passing them to the kernel:
// set before a graceful stop closes the sockets and leaves the program
// attached (Close), so that until the next process takes over the kernel
// neither answers a hosted egress IP nor sees the tunnel traffic. After d
// the program passes them again, as after a crash: a gateway that never
// comes back does not hold them for ever.
func (p *Program) Hold(d time.Duration) error {
	var ts unix.Timespec
	// bpf_ktime_get_ns reads CLOCK_MONOTONIC.
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("xdp: read the monotonic clock: %w", err)
	}
	until := uint64(ts.Nano() + int64(d))
	if err := p.objs.Ctl.Put(uint32(0), until); err != nil {
		return fmt.Errorf("xdp: set the hold: %w", err)
	}
	return nil
}

// RemoveNamespacePins removes the pins of every interface of the network
// namespace with inode ino, for whoever deletes that namespace: nobody
// could take its programs over, and a pin left behind outlives it in the
// bpffs. Each link, unpinned, detaches once no process holds it.
func RemoveNamespacePins(ino uint64) error {
	var errs []error
	for _, p := range NamespacePins(DefaultPinDir, ino) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("xdp: remove pin %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// awaitRelease waits (up to releaseWait) until no XDP program is left on
// the interface after a pin was dropped: the kernel frees an unpinned link,
// and detaches its program, asynchronously, and an attach meanwhile fails
// with EBUSY.
func (p *Program) awaitRelease() {
	for deadline := time.Now().Add(releaseWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l, err := netlink.LinkByIndex(p.ifindex)
		if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
			return
		}
	}
}

// releaseWait bounds awaitRelease.
const releaseWait = 2 * time.Second
