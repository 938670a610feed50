package engine

import (
	"errors"
	"fmt"
	"github.com/egret-gw/egret/gateway/config"
	"net"
	"net/netip"

	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/vishvananda/netlink"
)

// program puts the VTEPs and hosted egress IPs into every XDP program's maps
// and claims the egress IPs, diffing against what is there.
func (e *Engine) program(set *config.Settled) error {
	wantV, wantE := addrSet(set.VTEPs), addrSet(set.Hosted)
	var errs []error
	for _, ifc := range e.ifcs {
		if ifc.Program == nil {
			continue
		}
		errs = append(errs, steerMaps(ifc.Program, set, wantV, e.vteps, wantE, e.steered)...)
	}
	if err := errors.Join(errs...); err != nil {
		return err // each names the XDP map update that failed
	}
	e.vteps, e.steered = wantV, wantE
	if set.Admission != nil || e.adm.live {
		if err := e.admit(set); err != nil {
			return err // names the table
		}
	}
	if e.packet {
		if err := e.installDrops(true, set.VTEPs, set.Hosted); err != nil {
			return fmt.Errorf("engine: AF_PACKET mode needs kernel drops for the steered traffic: %w", err)
		}
	}
	if set.EgressIPsClaimed {
		return nil
	}
	return e.claimAll(set, true)
}

// steerMaps brings one program's maps from what they hold (haveV, haveE)
// to what set wants: its tunnel, VTEPs and hosted egress IPs. Adds come
// before removals, so an address in both is never missing.
func steerMaps(p *xdp.Program, set *config.Settled, wantV, haveV, wantE, haveE map[netip.Addr]bool) []error {
	port := uint16(xdp.PortVXLAN)
	if set.Tunnel == config.TunnelGeneve {
		port = xdp.PortGeneve
	}
	errs := []error{p.SetTunnels([]xdp.TunnelKey{{Port: port, VNI: set.VNI}})}
	for v := range wantV {
		if !haveV[v] {
			errs = append(errs, p.AddVTEP(v))
		}
	}
	for a := range wantE {
		if !haveE[a] {
			errs = append(errs, p.AddEgressIP(a))
		}
	}
	for v := range haveV {
		if !wantV[v] {
			errs = append(errs, p.RemoveVTEP(v))
		}
	}
	for a := range haveE {
		if !wantE[a] {
			errs = append(errs, p.RemoveEgressIP(a))
		}
	}
	return errs
}

func addrSet(as []netip.Addr) map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(as))
	for _, a := range as {
		m[a] = true
	}
	return m
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// checkVTEPs warns about VTEPs that no interface of the namespace carries:
// nodes could not resolve them.
func (e *Engine) checkVTEPs(set *config.Settled) {
	addrs, err := e.nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	for _, v := range set.VTEPs {
		found := false
		for _, ad := range addrs {
			if a, ok := netip.AddrFromSlice(ad.IP); ok && a.Unmap() == v {
				found = true
			}
		}
		if !found {
			e.log.Warn("engine: no interface has the VTEP address; nodes cannot reach it until it is added", "vtep", v)
		}
	}
}
