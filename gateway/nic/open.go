package nic

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/egret-gw/egret/gateway/xdp"
)

// Config says which interface to open and how.
type Config struct {
	Interface string
	// Pools has one Pool per queue (worker). Pass the same slice for every
	// interface so a worker forwards between them without copying; AF_XDP
	// needs pools from NewUmem.
	Pools []*Pool
	// Packet skips XDP and uses AF_PACKET.
	Packet bool
	XDP    xdp.Options
	Socket XDPOptions
	Logger *slog.Logger
}

// Interface is an opened interface: one Queue per queue and, in AF_XDP mode,
// the XDP program that steers frames to them.
type Interface struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	Program *xdp.Program // nil in AF_PACKET mode
	Queues  []Queue      // Queues[q] belongs to the worker of queue q
	// napiSaved are the sysfs files PreferBusyPoll changed, with their
	// previous values: {path, value}.
	napiSaved [][2]string
}

// Mode is "afxdp" or "afpacket".
func (i *Interface) Mode() string {
	if i.Program != nil {
		return "afxdp"
	}
	return "afpacket"
}

// Open attaches the XDP program to the interface and opens an AF_XDP socket
// per queue; where that fails (no XDP on the device or kernel) it logs why
// and opens AF_PACKET sockets instead, sharing the traffic by flow hash.
func Open(cfg Config) (*Interface, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if len(cfg.Pools) == 0 {
		return nil, errors.New("nic: Open needs at least one pool (one per queue)")
	}
	nif, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("nic: interface %q: %w", cfg.Interface, err)
	}
	ifc := &Interface{Name: nif.Name, Index: nif.Index, MAC: nif.HardwareAddr}
	if !cfg.Packet {
		err := ifc.openXDP(cfg, log)
		if err == nil {
			log.Info("nic: AF_XDP ready", "interface", ifc.Name, "queues", len(ifc.Queues), "xdp_mode", ifc.Program.Mode().String(),
				"busy_poll", cfg.Socket.BusyPoll.On())
			return ifc, nil
		}
		if errors.Is(err, ErrBusyPoll) {
			// Asked for, so not dropped silently by a fallback that cannot do it.
			return nil, fmt.Errorf("%w (interface %s)", err, ifc.Name)
		}
		log.Warn("nic: XDP cannot serve this interface; falling back to AF_PACKET", "interface", ifc.Name, "reason", err)
	}
	group := uint16(ifc.Index) // unique per interface within this process' namespace
	for _, pool := range cfg.Pools {
		opt := PacketOptions{}
		if len(cfg.Pools) > 1 {
			opt.FanoutGroup = group
		}
		p, err := OpenPacket(pool, ifc.Name, ifc.Index, opt)
		if err != nil {
			ifc.Close()
			return nil, err // names the interface and what failed
		}
		ifc.Queues = append(ifc.Queues, p)
	}
	log.Info("nic: AF_PACKET ready", "interface", ifc.Name, "sockets", len(ifc.Queues))
	return ifc, nil
}

func (ifc *Interface) openXDP(cfg Config, log *slog.Logger) error {
	opts := cfg.XDP
	if opts.Logger == nil {
		opts.Logger = log
	}
	prog, err := xdp.Load(ifc.Index, opts)
	if err != nil {
		return err
	}
	ifc.Program = prog
	if err := ifc.PreferBusyPoll(cfg.Socket.BusyPoll); err != nil {
		ifc.Close()
		return err
	}
	for q, pool := range cfg.Pools {
		s, err := OpenXSK(pool, ifc.Name, ifc.Index, q, cfg.Socket)
		if err == nil {
			err = prog.Register(q, s.FD())
			ifc.Queues = append(ifc.Queues, s)
		}
		if err != nil {
			ifc.Close()
			return fmt.Errorf("queue %d: %w", q, err)
		}
	}
	// Attached last: a program it replaces runs until the sockets are in.
	if err := prog.Attach(); err != nil {
		ifc.Close()
		return err
	}
	return nil
}

// Leave is Close before a restart: the XDP program is held for d
// (xdp.Program.Hold) before the sockets close, then left attached and
// pinned for the next process to take over. If the hold cannot be set the
// program is detached, as by Close.
func (ifc *Interface) Leave(d time.Duration) error {
	if ifc.Program == nil {
		return ifc.Close()
	}
	if err := ifc.Program.Hold(d); err != nil {
		return errors.Join(err, ifc.Close())
	}
	var errs []error
	for _, p := range ifc.Queues {
		errs = append(errs, p.Close())
	}
	ifc.Queues = nil
	errs = append(errs, ifc.Program.Close())
	ifc.Program = nil
	errs = append(errs, ifc.restoreNAPI())
	return errors.Join(errs...)
}

// Close closes the ports, detaches the XDP program and puts back the NAPI
// settings PreferBusyPoll changed.
func (ifc *Interface) Close() error {
	var errs []error
	for _, p := range ifc.Queues {
		errs = append(errs, p.Close())
	}
	ifc.Queues = nil
	if ifc.Program != nil {
		errs = append(errs, ifc.Program.Detach())
		ifc.Program = nil
	}
	errs = append(errs, ifc.restoreNAPI())
	return errors.Join(errs...)
}
