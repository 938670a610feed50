package engine

import (
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/natlog"
)

// tunnelOf is the pipeline's tunnel type for a settled (never TunnelNone)
// configuration's.
func tunnelOf(t config.Tunnel) gateway.Tunnel {
	if t == config.TunnelGeneve {
		return gateway.TunnelGeneve
	}
	return gateway.TunnelVXLAN
}

// gatewayConfig is the data-plane part of set, without Routes.
func gatewayConfig(set *config.Settled) gateway.Config {
	nodes := make([]gateway.Node, len(set.Nodes))
	for i, n := range set.Nodes {
		nodes[i] = gateway.Node{Name: n.Name, VTEP: n.VTEP, InnerMAC: n.InnerMAC, Local: n.Local, Pods: make([]gateway.Pod, len(n.Pods))}
		for j, p := range n.Pods {
			nodes[i].Pods[j] = gateway.Pod{Addr: p.Addr, Policy: p.Policy, Dest: p.Dest, Ref: natlog.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
		}
	}
	policies := make([]gateway.Policy, len(set.Policies))
	for i, p := range set.Policies {
		policies[i] = gateway.Policy{Name: p.Name, EgressIPs: p.EgressIPs}
	}
	var tables []gateway.DestTable
	for _, t := range set.DestTables {
		gt := gateway.DestTable{Name: t.Name, Rules: make([]gateway.DestRule, len(t.Rules))}
		for i, r := range t.Rules {
			gt.Rules[i] = gateway.DestRule{Prefix: r.Prefix, Policy: r.Policy, Exclude: r.Exclude}
		}
		tables = append(tables, gt)
	}
	return gateway.Config{DestTables: tables, VTEPs: set.VTEPs, InnerMAC: set.InnerMAC, RouterV4: set.RouterV4, RouterV6: set.RouterV6,
		Tunnels: []gateway.TunnelVNI{{Tunnel: tunnelOf(set.Tunnel), VNI: set.VNI}}, Nodes: nodes, Policies: policies,
		DeniedDestinations: set.DeniedDestinations, AllowedDestinations: set.AllowedDestinations}
}
