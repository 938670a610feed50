package engine

import (
	"errors"
	"fmt"
	"github.com/egret-gw/egret/gateway/config"
	"net"
	"time"
	"unsafe"

	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ifreqData is struct ifreq with the ifr_data pointer member. Data is an
// unsafe.Pointer, not a uintptr: the garbage collector neither keeps alive
// nor updates an object referenced only by a uintptr, so the ethtool_channels
// the kernel writes into could be freed or moved (stack growth copies it)
// before the ioctl returns.
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data unsafe.Pointer
	_    [16]byte
}

// rxQueues asks ethtool (ETHTOOL_GCHANNELS) how many receive queues the
// interface uses now: what an XDP socket may bind to. Devices without
// channel support have one.
func rxQueues(ifname string) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 1
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	var req ifreqData
	copy(req.Name[:len(req.Name)-1], ifname)
	req.Data = unsafe.Pointer(&ch)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	if e != 0 {
		return 1
	}
	n := int(ch.RxCount + ch.CombinedCount)
	if n < 1 {
		return 1
	}
	return n
}

// frameNeed is the frame size an MTU needs: Ethernet + VLAN tags + IPv6
// VXLAN encapsulation + inner Ethernet around it.
func frameNeed(mtu int) int { return mtu + 14 + 8 + 70 + 14 }

// sizeQueues settles the queue count (the first existing interface's RX
// queues when not given) and a frame size that holds the largest MTU plus
// encapsulation. Interfaces that do not exist yet are left for
// openMissing; at least one must.
func (e *Engine) sizeQueues(set *config.Settled) (queues, frameSize int, err error) {
	queues, frameSize = set.Queues, 2048
	found := false
	for _, name := range set.Interfaces {
		l, err := e.nl.LinkByName(name)
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("engine: interface %q: %w", name, err)
		}
		if !found && queues == 0 {
			queues = rxQueues(name)
		}
		found = true
		if need := frameNeed(l.Attrs().MTU); need > frameSize {
			frameSize = 4096
			if need > 4096 {
				return 0, 0, fmt.Errorf("engine: interface %s has MTU %d; frames above 4096 bytes are not supported", name, l.Attrs().MTU)
			}
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("engine: none of the interfaces %v exists", set.Interfaces)
	}
	return queues, frameSize, nil
}

// buildQueueLoops makes one queue loop per pool, with that queue's socket
// on every interface.
func (e *Engine) buildQueueLoops(set *config.Settled) {
	for q, pool := range e.pools {
		l := &queueLoop{q: q, gw: e.pipe.NewProcessor(uint64(q+1) * 0x9e3779b97f4a7c15), pool: pool, batch: set.Batch,
			wait: e.opt.Wait, now: e.opt.Clock, expireEvery: int64(e.opt.ExpireEvery), expireBudget: e.opt.ExpireBudget,
			busy: e.opt.BusyPoll.On(), cpu: -1, nap: unix.NsecToTimespec(int64(e.opt.BusyPollNap))}
		if q < len(e.opt.BusyPollCPUs) {
			l.cpu = e.opt.BusyPollCPUs[q]
		}
		for _, ifc := range e.ifcs {
			l.addPort(ifc)
		}
		e.loops = append(e.loops, l)
	}
}

// addPort gives the loop its queue's socket on ifc; only while the loop
// does not run.
func (l *queueLoop) addPort(ifc *nic.Interface) {
	p := ifc.Queues[l.q]
	l.ports = append(l.ports, p)
	l.ifindex = append(l.ifindex, ifc.Index)
	l.kernelRx = append(l.kernelRx, ifc.Program == nil)
	_, local := p.(*localQueue)
	l.localPort = append(l.localPort, local)
	if x, ok := p.(*nic.XSK); ok {
		l.xsks = append(l.xsks, x)
	}
	if f, ok := p.(fder); ok {
		l.pfd = append(l.pfd, unix.PollFd{Fd: int32(f.FD()), Events: unix.POLLIN})
	}
	l.tx = append(l.tx, nic.Batch{})
}

// xskBusyWait bounds how long opening an AF_XDP socket retries while the
// queue is still held: after kill -9 the kernel frees the dead process'
// sockets and UMEM asynchronously, and bind fails with EBUSY meanwhile.
const xskBusyWait = 5 * time.Second

// openInterface is nic.Open with two differences: an AF_XDP bind that
// fails with EBUSY (a killed predecessor's socket not yet freed) is retried
// for up to xskBusyWait before falling back to AF_PACKET; and the XDP
// program is attached only once its sockets are registered and its maps
// hold set's addresses, so that when it replaces the program a previous run
// left attached (xdp.Program.Attach) it steers from its first frame.
func (e *Engine) openInterface(name string, set *config.Settled) (*nic.Interface, error) {
	cfg := nic.Config{Interface: name, Pools: e.pools, Packet: set.Mode == "afpacket",
		XDP: xdp.Options{PinDir: e.opt.PinDir, Logger: e.log}, Logger: e.log,
		Socket: nic.XDPOptions{BusyPoll: e.opt.BusyPoll, TxSkbBudget: e.opt.TxSkbBudget}}
	if cfg.Packet {
		return nic.Open(cfg)
	}
	nif, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("engine: interface %q: %w", name, err)
	}
	ifc := &nic.Interface{Name: nif.Name, Index: nif.Index, MAC: nif.HardwareAddr}
	fail := func(err error) (*nic.Interface, error) {
		ifc.Close()
		if e.opt.BusyPoll.On() {
			return nil, fmt.Errorf("engine: %s: AF_XDP: %w (and busy polling needs AF_XDP)", name, err)
		}
		if set.Mode == "afxdp" {
			return nil, fmt.Errorf("engine: %s: AF_XDP: %w (and --mode afxdp forbids the AF_PACKET fallback)", name, err)
		}
		e.log.Warn("engine: XDP cannot serve this interface; falling back to AF_PACKET", "interface", name, "reason", err)
		cfg.Packet = true
		return nic.Open(cfg)
	}
	prog, err := xdp.Load(nif.Index, cfg.XDP)
	if err != nil {
		return fail(err)
	}
	ifc.Program = prog
	if err := checkRxQueues(name, rxQueues(name), len(e.pools)); err != nil {
		ifc.Close() // not fail(): AF_PACKET would hide the misconfiguration, not serve it
		return nil, err
	}
	if err := ifc.PreferBusyPoll(e.opt.BusyPoll); err != nil {
		ifc.Close()
		return nil, fmt.Errorf("engine: %s: %w", name, err)
	}
	for q, pool := range e.pools {
		var s *nic.XSK
		deadline := time.Now().Add(xskBusyWait)
		for {
			s, err = nic.OpenXSK(pool, name, nif.Index, q, cfg.Socket)
			if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil {
			ifc.Queues = append(ifc.Queues, s)
			err = prog.Register(q, s.FD())
		}
		if err != nil {
			return fail(fmt.Errorf("queue %d: %w", q, err))
		}
	}
	if err := errors.Join(steerMaps(prog, set, addrSet(set.VTEPs), nil, addrSet(set.Hosted), nil)...); err != nil {
		return fail(err)
	}
	if err := prog.Attach(); err != nil {
		return fail(err)
	}
	zc := "unknown"
	if x, ok := ifc.Queues[0].(*nic.XSK); ok {
		if z, err := x.ZeroCopy(); err == nil {
			zc = map[bool]string{true: "yes", false: "no (copy mode)"}[z]
		}
	}
	e.log.Info("engine: AF_XDP ready", "interface", name, "queues", len(ifc.Queues), "xdp_mode", prog.Mode().String(),
		"zero_copy", zc, "busy_poll", e.opt.BusyPoll.On())
	e.logTxSkbBudget(name, ifc)
	return ifc, nil
}
