package steer

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/egret-gw/egret/control/cluster"
	gwconfig "github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/internal/nsenter"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Kernel programs one network namespace (a node): the tunnel device, the
// fail-closed nftables table, rules, routes, neighbour and FDB entries. It
// finds its own state in the kernel by the device name, the rule priority,
// the table range and the route protocol, so a restarted agent reconciles
// instead of duplicating.
type Kernel struct {
	cfg      Config
	ns       netns.NsHandle // netns.None() for the current namespace
	h        *netlink.Handle
	nft      *nftState
	vtep     netip.Addr
	mac      [6]byte
	underIdx int
	excluded []netip.Prefix
	podCIDRs []netip.Prefix
	log      *slog.Logger
	// slots records, per unicast route, the units of its next hops
	// (placeHops), vacancies included, as last programmed.
	slots map[routeKey][]netip.Addr
	// afterStep, set by tests, runs after each stage of Apply ("filter",
	// "steering", "rules removed", "unsteered") so they can probe the
	// kernel in between.
	afterStep func(stage string)
}

// Changes counts what an Apply changed, for logs and tests.
type Changes struct {
	Added, Removed, Updated int
}

func (c Changes) String() string {
	return fmt.Sprintf("%d added, %d updated, %d removed", c.Added, c.Updated, c.Removed)
}

// Zero reports whether nothing changed.
func (c Changes) Zero() bool { return c == Changes{} }

// NewKernel opens the namespace ns (netns.None() for the agent's own) and
// resolves the VTEP. cfg must have defaults applied and be valid.
func NewKernel(cfg Config, ns netns.NsHandle, log *slog.Logger) (*Kernel, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var h *netlink.Handle
	var err error
	if ns.IsOpen() {
		h, err = netlink.NewHandleAt(ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	k := &Kernel{cfg: cfg, ns: ns, h: h, log: log, slots: map[routeKey][]netip.Addr{}}
	if k.excluded, err = cfg.Excluded(); err != nil {
		h.Close()
		return nil, err
	}
	if k.podCIDRs, err = cfg.PodNetworks(); err != nil {
		h.Close()
		return nil, err
	}
	if err := k.resolveVTEP(); err != nil {
		h.Close()
		return nil, err
	}
	if cfg.TunnelMAC != "" {
		m, err := net.ParseMAC(cfg.TunnelMAC)
		if err != nil || len(m) != 6 {
			h.Close()
			return nil, fmt.Errorf("tunnelMAC %q is not an Ethernet address", cfg.TunnelMAC)
		}
		copy(k.mac[:], m)
	} else {
		k.mac = cluster.VTEPMAC(k.vtep)
	}
	k.nft = &nftState{ns: ns, dev: cfg.Device, port: cfg.Port, vni: cfg.VNI, mask: cfg.MarkMask}
	return k, nil
}

// Close releases the netlink handle.
func (k *Kernel) Close() { k.h.Close() }

// VTEP is this node's tunnel address.
func (k *Kernel) VTEP() netip.Addr { return k.vtep }

// TunnelMAC is the MAC of the tunnel device: gateways must send replies to it.
func (k *Kernel) TunnelMAC() [6]byte { return k.mac }

// Params are the desired-state parameters of this node.
func (k *Kernel) Params() Params {
	return Params{Excluded: k.excluded, LocalVTEP: k.vtep, TableBase: k.cfg.TableBase, TableCount: k.cfg.TableCount,
		FailClosed: k.cfg.FailClosed, PodCIDRs: k.podCIDRs, TrustPodIPs: k.cfg.TrustPodIPs,
		NoEgressIP: k.cfg.NoEgressIP, LocalPort: k.localIndex() > 0, MarkMask: k.cfg.MarkMask}
}

// localIndex is the index of this node's gateway's local port
// (config.LocalKernelLink), 0 when there is none.
func (k *Kernel) localIndex() int {
	l, err := k.h.LinkByName(gwconfig.LocalKernelLink)
	if err != nil {
		return 0
	}
	return l.Attrs().Index
}

func (k *Kernel) resolveVTEP() error {
	if k.cfg.Underlay != "" {
		l, err := k.h.LinkByName(k.cfg.Underlay)
		if err != nil {
			return fmt.Errorf("underlay interface %q: %w", k.cfg.Underlay, err)
		}
		k.underIdx = l.Attrs().Index
	}
	if k.cfg.VTEP != "" {
		k.vtep = netip.MustParseAddr(k.cfg.VTEP)
		return nil
	}
	l, err := k.h.LinkByIndex(k.underIdx)
	if err != nil {
		return fmt.Errorf("underlay interface %q: %w", k.cfg.Underlay, err)
	}
	var v6 netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := k.h.AddrList(l, fam)
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", k.cfg.Underlay, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || !ip.Unmap().IsGlobalUnicast() {
				continue
			}
			ip = ip.Unmap()
			if ip.Is4() {
				k.vtep = ip
				return nil
			}
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	if v6.IsValid() {
		k.vtep = v6
		return nil
	}
	return fmt.Errorf("underlay interface %s: %w: it has no global address; give vtep in the config", k.cfg.Underlay, errNoVTEP)
}

// Setup installs what does not depend on the inputs, in fail-closed order:
// first the nftables table (so selected pods cannot leak), then the tunnel
// device and the sysctls. It is idempotent and keeps the filter's sets, so
// an agent that restarts blocks what its predecessor blocked, including
// pod addresses it has not classified yet.
func (k *Kernel) Setup() error {
	if err := k.nft.setup(k.excluded); err != nil {
		return err
	}
	if err := k.ensureDevice(); err != nil {
		return err
	}
	return k.sysctls()
}

// The multipath hash the agent sets: policy 3 (custom) over the fields
// source and destination address, protocol, source and destination port
// (0x37). Policy 1, the usual "L4" one, uses the hash a forwarded packet
// already carries when it has one, and a pod's packets carry their socket's
// random transmit hash, which TCP draws anew after a retransmission
// timeout: a connection would then move to another gateway, which holds no
// state for it. The custom policy always hashes the 5-tuple.
const (
	multipathHashPolicy = "3"
	multipathHashFields = "55" // 0x37
)

// sysctls sets the 5-tuple multipath hash through cfg.ProcSysNet, fields
// before policy (policy 3 with no fields hashes nothing). A value already
// in place is only read, so a node whose admin set it needs no writable
// mount.
func (k *Kernel) sysctls() error {
	dir := k.cfg.ProcSysNet
	fams := []string{"ipv4"}
	return nsenter.Do(k.ns, func() error {
		if _, err := os.Stat(filepath.Join(dir, "ipv6")); err == nil {
			fams = append(fams, "ipv6")
		}
		for _, f := range fams {
			if err := setSysctl(dir, f+"/fib_multipath_hash_fields", multipathHashFields); err != nil {
				return err
			}
			if err := setSysctl(dir, f+"/fib_multipath_hash_policy", multipathHashPolicy); err != nil {
				return err
			}
		}
		return nil
	})
}

// localSysctls sets loose reverse-path filtering on the gateway's local
// port (config.LocalKernelLink), where tunnel frames from other gateways'
// VTEPs arrive for this node's pods (gateway.Processor.toLocalKernel).
func (k *Kernel) localSysctls() error {
	return nsenter.Do(k.ns, func() error {
		return setSysctl(k.cfg.ProcSysNet, "ipv4/conf/"+gwconfig.LocalKernelLink+"/rp_filter", "2")
	})
}

// markTunnel makes reverse-path filtering use the packet's mark on the
// tunnel devices: a pod classified by destination has no rule from its
// address, so the reverse lookup of a gateway's reply (from the server to
// the pod) would find the main table's route, not the tunnel, and drop it.
// With the connection's mark restored on the reply (nftclass.go) and
// src_valid_mark, the lookup takes the object's fwmark rule to the tunnel.
func (k *Kernel) markTunnel() error {
	devs := []string{k.cfg.Device}
	if k.localIndex() > 0 {
		devs = append(devs, gwconfig.LocalKernelLink)
	}
	return nsenter.Do(k.ns, func() error {
		for _, d := range devs {
			if err := setSysctl(k.cfg.ProcSysNet, "ipv4/conf/"+d+"/src_valid_mark", "1"); err != nil {
				return err
			}
		}
		return nil
	})
}

// setSysctl writes v to dir/key unless it holds v already.
func setSysctl(dir, key, v string) error {
	p := filepath.Join(dir, key)
	name := "net." + strings.ReplaceAll(key, "/", ".")
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == v {
		return nil
	}
	err := os.WriteFile(p, []byte(v), 0)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("set %s=%s for 5-tuple multipath hashing: %s is read-only here (a container that is not privileged sees /proc/sys read-only): mount the node's /proc/sys/net into the container (hostPath, as deploy/steer/daemonset.yaml does) and name the mount point in procSysNet or --proc-sys-net, or set the sysctl on the node: %w", name, v, p, err)
	default:
		return fmt.Errorf("set %s=%s for 5-tuple multipath hashing through %s (procSysNet): %w", name, v, p, err)
	}
}

func (k *Kernel) mtu() int {
	if k.cfg.MTU != 0 {
		return k.cfg.MTU
	}
	overhead := 50
	if k.vtep.Is6() {
		overhead = 70
	}
	if k.underIdx != 0 {
		if l, err := k.h.LinkByIndex(k.underIdx); err == nil && l.Attrs().MTU > overhead+1280 {
			return l.Attrs().MTU - overhead
		}
	}
	return 1500 - overhead
}

func (k *Kernel) wantDevice() *netlink.Vxlan {
	return &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: k.cfg.Device, MTU: k.mtu(), HardwareAddr: net.HardwareAddr(k.mac[:])},
		VxlanId:      int(k.cfg.VNI),
		VtepDevIndex: k.underIdx,
		SrcAddr:      net.IP(k.vtep.AsSlice()),
		Port:         int(k.cfg.Port),
		Learning:     false,
		UDPCSum:      k.vtep.Is6(),
	}
}

// ensureDevice creates the VXLAN device or fixes it. A device of the right
// name with other tunnel parameters is recreated: it is the agent's.
func (k *Kernel) ensureDevice() error {
	want := k.wantDevice()
	l, err := k.h.LinkByName(k.cfg.Device)
	if err == nil {
		v, ok := l.(*netlink.Vxlan)
		if !ok || v.VxlanId != want.VxlanId || v.Port != want.Port || !v.SrcAddr.Equal(want.SrcAddr) ||
			v.VtepDevIndex != want.VtepDevIndex || v.Learning || v.FlowBased {
			k.log.Warn("tunnel device has other parameters; recreating it", "device", k.cfg.Device, "type", l.Type())
			if err := k.h.LinkDel(l); err != nil {
				return fmt.Errorf("remove outdated tunnel device %s: %w", k.cfg.Device, err)
			}
			l = nil
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return fmt.Errorf("look up tunnel device %s: %w", k.cfg.Device, err)
	} else {
		l = nil
	}
	if l == nil {
		if err := k.h.LinkAdd(want); err != nil {
			return fmt.Errorf("create VXLAN device %s (VNI %d, port %d, local %v): %w", k.cfg.Device, k.cfg.VNI, k.cfg.Port, k.vtep, err)
		}
		k.log.Info("created tunnel device", "device", k.cfg.Device, "vni", k.cfg.VNI, "port", k.cfg.Port, "vtep", k.vtep, "mac", net.HardwareAddr(k.mac[:]).String())
		if l, err = k.h.LinkByName(k.cfg.Device); err != nil {
			return fmt.Errorf("look up tunnel device %s: %w", k.cfg.Device, err)
		}
	}
	if !slices.Equal(l.Attrs().HardwareAddr, want.HardwareAddr) {
		if err := k.h.LinkSetHardwareAddr(l, want.HardwareAddr); err != nil {
			return fmt.Errorf("set MAC of %s: %w", k.cfg.Device, err)
		}
	}
	if l.Attrs().MTU != want.MTU {
		if err := k.h.LinkSetMTU(l, want.MTU); err != nil {
			return fmt.Errorf("set MTU of %s to %d: %w", k.cfg.Device, want.MTU, err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := k.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("bring up %s: %w", k.cfg.Device, err)
		}
	}
	return nil
}

func (k *Kernel) devIndex() (int, error) {
	l, err := k.h.LinkByName(k.cfg.Device)
	if err != nil {
		return 0, fmt.Errorf("tunnel device %s: %w (run Setup first)", k.cfg.Device, err)
	}
	return l.Attrs().Index, nil
}

// Cleanup removes everything the agent owns: rules, routes in its tables,
// the tunnel device (with its neighbour and FDB entries) and the nftables
// table. Rules and routes go first so nothing is left steered into a
// missing device; the filter goes last.
func (k *Kernel) Cleanup() error {
	var errs []error
	if _, err := k.Apply(State{}); err != nil {
		errs = append(errs, err)
	}
	if l, err := k.h.LinkByName(k.cfg.Device); err == nil {
		if err := k.h.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("remove tunnel device %s: %w", k.cfg.Device, err))
		}
	}
	if err := k.nft.remove(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func hostNet(a netip.Addr) *net.IPNet { return ipNet(netip.PrefixFrom(a, a.BitLen())) }

func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// Drops is the number of packets the fail-closed filter dropped because
// they tried to leave outside the tunnel: from selected pods, and from pod
// addresses not classified yet (failClosed: podCIDR).
func (k *Kernel) Drops() (uint64, error) {
	sel, uncl, err := k.nft.drops()
	return sel + uncl, err
}

// TunnelDrops is the number of packets the tunnel rules dropped: frames of
// the tunnel's VNI from an address that is no known gateway VTEP, and pods'
// own VXLAN or Geneve to a gateway VTEP.
func (k *Kernel) TunnelDrops() (uint64, error) {
	src, pod, err := k.nft.tunnelDrops()
	return src + pod, err
}

func (k *Kernel) step(stage string) {
	if k.afterStep != nil {
		k.afterStep(stage)
	}
}
