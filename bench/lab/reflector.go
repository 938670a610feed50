package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/egret-gw/egret/lab"
)

// The ceiling (issue 34, item 1): two sides that do the least a gateway
// can do to a frame here, on the same rig and cores, so that the report
// says how far Egret and the kernel are from the limit of this path.
//
//   - afxdp-reflector: gateway/xdp's program steers the tunnel frames to an
//     AF_XDP socket (gateway/nic, the sockets Egret uses), and one thread
//     rewrites each frame in place (rewrite) and transmits it from the same
//     buffer: the ceiling of any AF_XDP userspace gateway on this path.
//   - xdp-reflector: an XDP program (reflect.c) does the same rewrite in the
//     kernel and sends the frame back out with XDP_TX: the ceiling of any
//     in-kernel fast path here.
//
// The rewrite is fixed: the outer headers come off (VXLAN decapsulation),
// the inner Ethernet header is addressed from the gateway to the router,
// and the inner source address becomes the egress IP, the IP and UDP
// checksums updated for it; no lookup, no state. Each runs in a process of
// its own (this program, re-run as `lab reflector`) in the gateway's
// namespace, on a lab built as the kernel side's (which the lab's checks
// need): the XDP program takes every tunnel frame before the kernel sees it.
const (
	sideAFXDPReflector = "afxdp-reflector"
	sideXDPReflector   = "xdp-reflector"
)

// reflectorSide reports whether side is one of the reflectors.
func reflectorSide(side string) bool {
	return side == sideAFXDPReflector || side == sideXDPReflector
}

// reflects reports whether the reflectors can stand in for a gateway in
// sc: forward UDP over the IPv4 underlay through one queue (they answer
// nothing and keep no flows).
func reflects(sc scenario) bool {
	return sc.Underlay == lab.UnderlayIPv4 && max(sc.Queues, 1) == 1 && sc.Traffic.Dir == "" && sc.Traffic.Kind == ""
}

// rewrite is the reflectors' fixed rewrite.
type rewrite struct {
	dstMAC, srcMAC [6]byte // the router's eth0, the gateway's eth0
	egress         [4]byte
}

// Offsets of a VXLAN frame over IPv4 (outer IPv4 without options).
const (
	outerLen = ethLen + 20 + udpLen + vxlanLen // 50: what decapsulation removes
)

// apply rewrites the VXLAN frame f in place and returns where the frame
// to send starts in it; ok is false for a frame that is not IPv4 VXLAN
// carrying IPv4 (left as it was).
func (rw *rewrite) apply(f []byte) (off int, ok bool) {
	if len(f) < outerLen+ethLen+20 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14] != 0x45 || f[23] != syscall.IPPROTO_UDP ||
		binary.BigEndian.Uint16(f[ethLen+20+2:]) != lab.VXLANPort {
		return 0, false
	}
	in := f[outerLen:]
	ihl := int(in[ethLen]&0xf) * 4
	if binary.BigEndian.Uint16(in[12:]) != 0x0800 || in[ethLen]>>4 != 4 || ihl < 20 || len(in) < ethLen+ihl {
		return 0, false
	}
	copy(in[0:6], rw.dstMAC[:])
	copy(in[6:12], rw.srcMAC[:])
	ip := header.IPv4(in[ethLen : ethLen+ihl])
	old := ip.SrcAddr()
	if l4 := ethLen + ihl; ip[9] == syscall.IPPROTO_UDP && len(in) >= l4+udpLen {
		if u := header.UDP(in[l4:]); u.Checksum() != 0 {
			u.SetChecksum(header.ChecksumUpdateAddr(u.Checksum(), old[:], rw.egress[:]))
		}
	}
	ip.SetSrcAddrWithChecksumUpdate(rw.egress)
	return outerLen, true
}

// reflectorConfig is what a reflector process is told.
type reflectorConfig struct {
	mode   string // sideAFXDPReflector or sideXDPReflector
	dev    string // the gateway's interface
	vtep   netip.Addr
	rw     rewrite
	pinDir string // where gateway/xdp pins its program (afxdp)
}

// reflectorMain is `lab reflector ...`: it runs one reflector in the
// current network namespace until SIGTERM, saying "ready" on stdout once
// frames flow through it.
func reflectorMain(args []string) error {
	fs := flag.NewFlagSet("reflector", flag.ContinueOnError)
	var cfg reflectorConfig
	var dst, egress, vtep string
	fs.StringVar(&cfg.mode, "mode", sideAFXDPReflector, sideAFXDPReflector+" or "+sideXDPReflector)
	fs.StringVar(&cfg.dev, "dev", "eth0", "interface")
	fs.StringVar(&dst, "dst-mac", "", "the router's MAC")
	fs.StringVar(&egress, "egress", "", "the egress IP (IPv4)")
	fs.StringVar(&vtep, "vtep", "", "the gateway's tunnel address (IPv4)")
	fs.StringVar(&cfg.pinDir, "pin-dir", "", "gateway/xdp's pin directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mac, err := net.ParseMAC(dst)
	if err != nil || len(mac) != 6 {
		return fmt.Errorf("-dst-mac %q: not a MAC", dst)
	}
	copy(cfg.rw.dstMAC[:], mac)
	e, err := netip.ParseAddr(egress)
	if err != nil || !e.Is4() {
		return fmt.Errorf("-egress %q: not an IPv4 address", egress)
	}
	cfg.rw.egress = e.As4()
	if cfg.vtep, err = netip.ParseAddr(vtep); err != nil || !cfg.vtep.Is4() {
		return fmt.Errorf("-vtep %q: not an IPv4 address", vtep)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() { <-stop; close(done) }()
	return runReflector(cfg, done, func() { fmt.Println("ready") })
}

// runReflector runs cfg's reflector in the current network namespace
// until done closes; ready is called once it takes frames.
func runReflector(cfg reflectorConfig, done <-chan struct{}, ready func()) error {
	ifc, err := net.InterfaceByName(cfg.dev)
	if err != nil {
		return err
	}
	copy(cfg.rw.srcMAC[:], ifc.HardwareAddr)
	switch cfg.mode {
	case sideAFXDPReflector:
		return reflectAFXDP(cfg, done, ready)
	case sideXDPReflector:
		return reflectXDP(cfg, ifc.Index, done, ready)
	}
	return fmt.Errorf("reflector mode %q: use %s or %s", cfg.mode, sideAFXDPReflector, sideXDPReflector)
}

// reflectAFXDP opens the interface as Egret does (gateway/nic, with
// gateway/xdp's program steering the VXLAN frames to its socket) and
// reflects on one locked thread.
func reflectAFXDP(cfg reflectorConfig, done <-chan struct{}, ready func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pool, err := nic.NewUmem(4096, 2048, 0)
	if err != nil {
		return err
	}
	ifc, err := nic.Open(nic.Config{Interface: cfg.dev, Pools: []*nic.Pool{pool}, XDP: xdp.Options{PinDir: cfg.pinDir}})
	if err != nil {
		return err
	}
	defer ifc.Close()
	if ifc.Program == nil {
		return errors.New("no AF_XDP on " + cfg.dev + ": the reflector has no AF_PACKET fallback")
	}
	if err := ifc.Program.SetTunnels([]xdp.TunnelKey{{Port: lab.VXLANPort, VNI: lab.VNI}}); err != nil {
		return err
	}
	if err := ifc.Program.AddVTEP(cfg.vtep); err != nil {
		return err
	}
	ready()
	q := ifc.Queues[0]
	var in, out nic.Batch
	for {
		select {
		case <-done:
			return nil
		default:
		}
		if err := q.Receive(&in, 100*time.Millisecond); err != nil {
			return err
		}
		for i := 0; i < in.N; i++ {
			if off, ok := cfg.rw.apply(in.Frame(i)); ok && in.SetFrame(i, in.Off[i]+off, in.Len[i]-off) {
				out.Take(&in, i)
			}
		}
		in.Release()
		if out.N > 0 {
			q.Transmit(&out)
		}
	}
}

// reflectXDP loads reflect.c's program with cfg's rewrite and attaches it
// to the interface until done closes.
func reflectXDP(cfg reflectorConfig, ifindex int, done <-chan struct{}, ready func()) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	spec, err := loadReflect()
	if err != nil {
		return err
	}
	for name, v := range map[string]any{"dst_mac": cfg.rw.dstMAC, "src_mac": cfg.rw.srcMAC, "egress": cfg.rw.egress} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("xdp-reflector: %s: %w", name, err)
		}
	}
	var objs reflectObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("xdp-reflector: load: %w", err)
	}
	defer objs.Close()
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.Reflect, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("xdp-reflector: attach: %w", err)
	}
	defer l.Close()
	ready()
	<-done
	return nil
}

// peerXDP attaches reflect.c's pass program to veth dev (in the current
// namespace), the peer of the xdp-reflector's interface: the kernel queues
// a veth's XDP_TX frames to its peer and schedules the peer's NAPI only
// when the peer has an XDP program (with GRO's NAPI alone they are counted
// sent and never arrive). Close detaches it.
func peerXDP(dev string) (io.Closer, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	var objs reflectObjects
	if err := loadReflectObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("xdp-reflector: load: %w", err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: objs.Pass, Interface: ifc.Index, Flags: link.XDPDriverMode})
	if err != nil {
		objs.Close()
		return nil, fmt.Errorf("xdp-reflector: attach to the peer %s: %w", dev, err)
	}
	return closers{l, &objs}, nil
}

// closers closes each in turn.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// startReflector starts side's reflector process in the gateway's
// namespace and waits for it to say it is ready; stop ends it.
func startReflector(side string, spec *lab.Spec, tg target) (pid int, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, nil, err
	}
	routerMAC, err := macOf(spec.NS(spec.Router.Name), "eth0")
	if err != nil {
		return 0, nil, err
	}
	pinDir, err := os.MkdirTemp("/sys/fs/bpf", "egret-bench-reflector-")
	if err != nil {
		return 0, nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", spec.NS(tg.gw.Name), self, "reflector", "-mode", side,
		"-dst-mac", net.HardwareAddr(routerMAC[:]).String(), "-egress", tg.egress.String(), "-vtep", tg.gw.IP.String(), "-pin-dir", pinDir)
	cmd.Stderr = os.Stderr
	outp, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		os.RemoveAll(pinDir)
		return 0, nil, fmt.Errorf("%s: %w", side, err)
	}
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(pinDir)
	}
	line, err := bufio.NewReader(outp).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		stop()
		return 0, nil, fmt.Errorf("%s did not start (%q, %v)", side, line, err)
	}
	return cmd.Process.Pid, stop, nil
}
