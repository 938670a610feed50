package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProgramName is the name the kernel shows for Egret's XDP program
// (`ip link`, bpftool); the loader uses it to recognise a stale copy.
const ProgramName = "egret_xdp"

// DefaultPinDir is where each interface's attachment link and counters are
// pinned (pin.go), so that the next process takes over the program a
// stopped or crashed one left attached.
const DefaultPinDir = "/sys/fs/bpf/egret"

// Mode is how the program is attached to an interface.
type Mode int

// Attach modes. ModeAuto tries the driver hook and falls back to the generic
// (skb) hook.
const (
	ModeAuto Mode = iota
	ModeDriver
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeDriver:
		return "driver"
	case ModeGeneric:
		return "generic"
	}
	return "auto"
}

// ErrNotSupported says the kernel or the interface cannot run the program;
// the caller falls back to AF_PACKET.
var ErrNotSupported = errors.New("xdp: not supported on this interface")

// Options configure Attach; the zero value is usable.
type Options struct {
	Mode   Mode   // ModeAuto unless set
	PinDir string // DefaultPinDir unless set
	Logger *slog.Logger
}

// Stats are the program's counters summed over CPUs.
type Stats struct {
	Pass   uint64 // frames given to the kernel
	Tunnel uint64 // tunnel frames sent to a socket (or passed: no socket on the queue)
	Egress uint64 // frames to an egress IP sent to a socket (likewise)
	// TunnelOther counts tunnel frames to a local VTEP of a type or VNI
	// SetTunnels did not name, given to the kernel (a CNI's, most likely).
	TunnelOther uint64
	// Held counts tunnel and egress frames dropped because no socket was
	// registered for their queue while a hold was set (Hold): the gap of a
	// graceful restart. NoSocket counts those passed to the kernel instead
	// (no hold: a crash, or a queue without a socket).
	Held     uint64
	NoSocket uint64
}

// Program is Egret's XDP program for one interface, with its maps: loaded
// by Load, attached by Attach.
type Program struct {
	objs    egretObjects
	lnk     link.Link
	pins    pins
	ifindex int
	want    Mode // the mode asked for
	mode    Mode // the mode attached in
	dropped bool // Attach dropped a pinned link (awaitRelease)
	log     *slog.Logger
}

// Load loads the program and its maps for the interface with the given
// index without attaching it: the caller fills the maps and registers its
// sockets, then Attach puts the program on the interface, ready from its
// first frame.
func Load(ifindex int, opts Options) (*Program, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.PinDir == "" {
		opts.PinDir = DefaultPinDir
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("xdp: raise memlock limit: %w", err)
	}
	if err := ensurePinDir(opts.PinDir); err != nil {
		return nil, err
	}
	ps, err := pinsFor(opts.PinDir, ifindex)
	if err != nil {
		return nil, err
	}
	p := &Program{pins: ps, ifindex: ifindex, want: opts.Mode, log: log}
	if err := loadEgretObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("xdp: load program: %w", err)
	}
	return p, nil
}

// Attach puts the loaded program on its interface. A program a previous
// run left attached (pinned, pin.go) is replaced in place (link.Update),
// so the interface is never without one; a stale pin is dropped first.
func (p *Program) Attach() error {
	if p.lnk != nil {
		return nil
	}
	if err := os.MkdirAll(p.pins.dir, 0o700); err != nil {
		return fmt.Errorf("xdp: create pin directory: %w", err)
	}
	if p.takeOver() {
		return nil
	}
	err := p.attachNew()
	if err != nil {
		_ = os.Remove(p.pins.dir) // if empty: nothing was pinned
	}
	return err
}

// attachNew attaches the program to an interface that has no link of ours.
func (p *Program) attachNew() error {
	log := p.log
	if p.dropped {
		p.awaitRelease()
	}
	if err := p.removeLegacy(log); err != nil {
		return err
	}
	mode := p.want
	modes := []Mode{mode}
	if mode == ModeAuto {
		modes = []Mode{ModeDriver, ModeGeneric}
	}
	var errs []error
	for _, m := range modes {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.EgretXdp, Interface: p.ifindex, Flags: flags})
		if err != nil {
			log.Info("xdp: attach mode failed", "ifindex", p.ifindex, "mode", m.String(), "err", err)
			errs = append(errs, fmt.Errorf("%s mode: %w", m, err))
			continue
		}
		if err := p.pin(l); err != nil {
			_ = l.Unpin() // if the link's pin was made, the counters' was not
			l.Close()
			return err
		}
		p.lnk, p.mode = l, m
		log.Info("xdp: program attached", "ifindex", p.ifindex, "mode", m.String())
		return nil
	}
	return fmt.Errorf("%w: ifindex %d: %w", ErrNotSupported, p.ifindex, errors.Join(errs...))
}

// removeLegacy detaches an egret program attached through netlink (not a
// link), for example by an older build; any other program is left alone and
// makes the attach fail with a clear error.
func (p *Program) removeLegacy(log *slog.Logger) error {
	l, err := netlink.LinkByIndex(p.ifindex)
	if err != nil {
		return fmt.Errorf("xdp: find interface %d: %w", p.ifindex, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached {
		return nil
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return fmt.Errorf("xdp: inspect program %d attached to %s: %w", x.ProgId, l.Attrs().Name, err)
	}
	info, err := prog.Info()
	prog.Close()
	if err != nil {
		return fmt.Errorf("xdp: inspect program %d attached to %s: %w", x.ProgId, l.Attrs().Name, err)
	}
	if info.Name != ProgramName {
		return fmt.Errorf("xdp: interface %s already runs XDP program %q (id %d); detach it first", l.Attrs().Name, info.Name, x.ProgId)
	}
	// A program attached through a link we do not hold cannot be removed
	// through netlink; the attach below will then report EBUSY.
	if err := netlink.LinkSetXdpFdWithFlags(l, -1, int(x.Flags)); err != nil {
		return fmt.Errorf("xdp: remove stale egret program from %s: %w", l.Attrs().Name, err)
	}
	log.Info("xdp: removed stale program", "interface", l.Attrs().Name, "id", x.ProgId)
	return nil
}

// attachedMode asks the kernel how the program on ifindex is attached.
func attachedMode(ifindex int) Mode {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil {
		return ModeAuto
	}
	switch l.Attrs().Xdp.AttachMode {
	case 1: // XDP_ATTACHED_DRV
		return ModeDriver
	case 2: // XDP_ATTACHED_SKB
		return ModeGeneric
	}
	return ModeAuto
}

// Mode reports how the program ended up attached.
func (p *Program) Mode() Mode { return p.mode }

// Ifindex is the interface the program is attached to.
func (p *Program) Ifindex() int { return p.ifindex }

// Register makes frames the program steers on queue go to the AF_XDP socket fd.
func (p *Program) Register(queue, fd int) error {
	if err := p.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("xdp: register socket for queue %d: %w", queue, err)
	}
	return nil
}

// Unregister removes the socket of queue; its frames go to the kernel again.
func (p *Program) Unregister(queue int) error {
	if err := p.objs.Xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: unregister queue %d: %w", queue, err)
	}
	return nil
}

// Tunnel UDP ports: the XDP program recognises these two only.
const (
	PortVXLAN  = 4789
	PortGeneve = 6081
)

// MaxTunnels bounds the (port, VNI) pairs SetTunnels takes.
const MaxTunnels = 64

// TunnelKey is one tunnel the program takes: the UDP port of its type
// (PortVXLAN or PortGeneve) and its VNI.
type TunnelKey struct {
	Port uint16
	VNI  uint32
}

// SetTunnels makes the program take tunnel traffic to a VTEP of these
// (port, VNI) pairs only, replacing the pairs set before: packets of
// another type or VNI are passed to the kernel and counted
// (Stats.TunnelOther). Until it is called no tunnel packet is taken.
func (p *Program) SetTunnels(ts []TunnelKey) error {
	if len(ts) > MaxTunnels {
		return fmt.Errorf("xdp: %d tunnels given, the program takes at most %d", len(ts), MaxTunnels)
	}
	want := map[egretTunnelKey]bool{}
	for _, t := range ts {
		if t.Port != PortVXLAN && t.Port != PortGeneve {
			return fmt.Errorf("xdp: tunnel port %d is neither VXLAN's (%d) nor Geneve's (%d)", t.Port, PortVXLAN, PortGeneve)
		}
		if t.VNI >= 1<<24 {
			return fmt.Errorf("xdp: VNI %d does not fit in 24 bits", t.VNI)
		}
		// Port is __be16: network order in memory, as the program compares it.
		want[egretTunnelKey{Port: binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, t.Port)), Vni: t.VNI}] = true
	}
	// Add first, then remove: a pair in both sets is never missing.
	for k := range want {
		if err := p.objs.Tunnels.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("xdp: set tunnel: %w", err)
		}
	}
	var k egretTunnelKey
	var v uint8
	var stale []egretTunnelKey
	it := p.objs.Tunnels.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("xdp: list tunnels: %w", err)
	}
	for _, k := range stale {
		if err := p.objs.Tunnels.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdp: remove tunnel: %w", err)
		}
	}
	return nil
}

// AddVTEP makes tunnel traffic (UDP 4789, 6081; see SetTunnels) to the local
// address a go to the sockets.
func (p *Program) AddVTEP(a netip.Addr) error { return p.setAddr(p.objs.Vtep4, p.objs.Vtep6, a, true) }

// RemoveVTEP stops steering tunnel traffic to a.
func (p *Program) RemoveVTEP(a netip.Addr) error {
	return p.setAddr(p.objs.Vtep4, p.objs.Vtep6, a, false)
}

// AddEgressIP makes all traffic to the hosted egress IP a go to the sockets.
func (p *Program) AddEgressIP(a netip.Addr) error {
	return p.setAddr(p.objs.Egress4, p.objs.Egress6, a, true)
}

// RemoveEgressIP stops steering traffic to a.
func (p *Program) RemoveEgressIP(a netip.Addr) error {
	return p.setAddr(p.objs.Egress4, p.objs.Egress6, a, false)
}

func (p *Program) setAddr(m4, m6 *ebpf.Map, a netip.Addr, add bool) error {
	if !a.IsValid() {
		return errors.New("xdp: invalid address")
	}
	a = a.Unmap()
	var err error
	if a.Is4() {
		k := a.As4() // network order in memory, as the program reads it
		if add {
			err = m4.Put(k, uint8(1))
		} else {
			err = m4.Delete(k)
		}
	} else {
		k := egretIn6Key{A: a.As16()}
		if add {
			err = m6.Put(k, uint8(1))
		} else {
			err = m6.Delete(k)
		}
	}
	if err != nil && !(errors.Is(err, ebpf.ErrKeyNotExist) && !add) {
		return fmt.Errorf("xdp: update address %s: %w", a, err)
	}
	return nil
}

// Stats reads the program's counters.
func (p *Program) Stats() (Stats, error) {
	return readStats(p.objs.Stats)
}

// readStats sums a stats map (this program's or a predecessor's) over CPUs.
func readStats(m *ebpf.Map) (Stats, error) {
	var s Stats
	for i, dst := range []*uint64{&s.Pass, &s.Tunnel, &s.Egress, &s.TunnelOther, &s.Held, &s.NoSocket} {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return s, fmt.Errorf("xdp: read counters: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return s, nil
}

// Detach removes the program from the interface, its pins and its maps:
// the final stop, which leaves nothing behind (a program a previous run
// left on the interface included). The interface then passes every frame
// to the kernel.
func (p *Program) Detach() error {
	var errs []error
	if p.lnk != nil {
		// Detach explicitly: another holder of the link (a second Program
		// in this process) must not keep the program running.
		if err := p.lnk.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			errs = append(errs, err)
		}
		if err := p.lnk.Unpin(); err != nil {
			errs = append(errs, err)
		}
		if err := p.lnk.Close(); err != nil {
			errs = append(errs, err)
		}
		p.lnk = nil
		errs = append(errs, p.unpinRest())
	} else {
		// Never attached (a start that failed, or falls back to
		// AF_PACKET): a program a previous run left held must not keep
		// the interface's traffic from the kernel either.
		errs = append(errs, p.dropPinned())
	}
	if err := p.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xdp: detach from ifindex %d: %w", p.ifindex, err)
	}
	return nil
}

// Close releases the program's file descriptors but leaves it attached
// through its pinned link, as a crash would (with a hold if Hold set one);
// the next Attach replaces it.
func (p *Program) Close() error {
	var errs []error
	if p.lnk != nil {
		errs = append(errs, p.lnk.Close())
		p.lnk = nil
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// ensurePinDir makes sure the pin directory is on a bpffs. It is when a
// bpffs, or a directory of one, is mounted there: deploy/ mounts only the
// host's /sys/fs/bpf/egret into the gateway's container, which then sees
// no other pin of the host. Else a bpffs is mounted on its parent unless
// one is there already.
func ensurePinDir(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	return ensureBPFFS(filepath.Dir(dir))
}

// ensureBPFFS mounts bpffs at dir if nothing is mounted there yet.
func ensureBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("xdp: create %s: %w", dir, err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("xdp: mount bpffs at %s (needed to pin the XDP link): %w", dir, err)
	}
	return nil
}
