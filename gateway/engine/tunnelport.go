package engine

import (
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/xdp"
	"github.com/vishvananda/netlink"
)

// sharedDev is a kernel VXLAN or Geneve device listening on the gateway's
// tunnel port.
type sharedDev struct {
	name string
	kind string // "vxlan" or "geneve"
	vni  uint32
}

// sharedTunnelPort lists the kernel tunnel devices of the gateway's type
// whose UDP port is the gateway's: a CNI (Calico VXLAN, Antrea, OVN Geneve,
// flannel set to 4789) or a co-located steer agent's egret0.
func sharedTunnelPort(t gateway.Tunnel) ([]sharedDev, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	var out []sharedDev
	for _, l := range links {
		switch d := l.(type) {
		case *netlink.Vxlan:
			if t == gateway.TunnelVXLAN && d.Port == xdp.PortVXLAN {
				out = append(out, sharedDev{d.Name, "vxlan", uint32(d.VxlanId)})
			}
		case *netlink.Geneve:
			if t == gateway.TunnelGeneve && d.Dport == xdp.PortGeneve {
				out = append(out, sharedDev{d.Name, "geneve", d.ID})
			}
		}
	}
	return out, nil
}

// warnSharedTunnelPort says at start when a kernel tunnel device on this
// node shares the gateway's port. Its traffic is not the gateway's: the XDP
// program passes packets of other VNIs to the kernel (AF_PACKET: the kernel
// gets them anyway, and the pipeline counts them as tunnel_mismatch). One
// with the gateway's own VNI loses its packets to this node's VTEP to the
// gateway, which is worth more than a warning to know about.
func (e *Engine) warnSharedTunnelPort(set *config.Settled) {
	devs, err := sharedTunnelPort(tunnelOf(set.Tunnel))
	if err != nil {
		e.log.Warn("engine: could not list the kernel's tunnel devices to check for one sharing the tunnel port", "err", err)
		return
	}
	for _, d := range devs {
		if d.vni == set.VNI {
			e.log.Warn("engine: kernel tunnel device "+d.name+" uses the gateway's tunnel port and VNI: its packets to this node's VTEP go to the gateway, not to it; give the gateway (and the steer agents) another VNI",
				"device", d.name, "type", d.kind, "vni", d.vni)
			continue
		}
		e.log.Warn("engine: kernel tunnel device "+d.name+" shares the gateway's tunnel port with another VNI: the gateway takes only its own VNI and leaves the device's traffic to the kernel",
			"device", d.name, "type", d.kind, "vni", d.vni, "gateway_vni", set.VNI)
	}
}
