package main

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/gateway/flowsync"
)

// syncAdmission wraps src so that its changes are seen, and returns the
// flow sync's Config.Admission for node: the cluster as src's view says
// it, rebuilt on the first call after an EgressIP, Node or Pod changed
// (each handshake and batch asks; most calls only load a counter).
// Give the gateway agent the returned source.
func syncAdmission(src cluster.Source, node string) (cluster.Source, func() *flowsync.Admission) {
	w := &changeCounting{Source: src}
	var (
		mu   sync.Mutex
		gen  int64 = -1
		last *flowsync.Admission
	)
	return w, func() *flowsync.Admission {
		g := w.gen.Load()
		mu.Lock()
		defer mu.Unlock()
		if g == gen {
			return last
		}
		last, gen = admissionOf(src.View(), node), g
		return last
	}
}

// changeCounting counts its Source's changes.
type changeCounting struct {
	cluster.Source
	gen atomic.Int64
}

func (c *changeCounting) Start(ctx context.Context, changed func(cluster.Kind)) error {
	return c.Source.Start(ctx, func(k cluster.Kind) {
		c.gen.Add(1)
		changed(k)
	})
}

// admissionOf is what the view lets peers send to node: for each egress IP
// whose standby annotation names node, the node its status places it on;
// each node's InternalIPs, VTEPs, podCIDRs and pod addresses.
func admissionOf(v cluster.View, node string) *flowsync.Admission {
	standby := map[netip.Addr]string{}
	for _, e := range v.EgressIPs {
		if e == nil {
			continue
		}
		sb, err := egressv1.Standbys(e)
		if err != nil {
			continue // an unreadable annotation backs nothing
		}
		for _, it := range e.Status.Items {
			ip, err := netip.ParseAddr(it.EgressIP)
			if err == nil && (sb[ip] == node || sb[ip.Unmap()] == node) && it.Node != node {
				standby[ip.Unmap()] = it.Node
			}
		}
	}
	nodes := make(map[string]flowsync.AdmitNode, len(v.Nodes))
	for _, n := range v.Nodes {
		if n == nil {
			continue
		}
		var an flowsync.AdmitNode
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				an.Addrs = append(an.Addrs, ip.Unmap())
			}
		}
		an.VTEPs, _ = cluster.NodeVTEPs(n) // refused annotation addresses are left out
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				an.Pods = append(an.Pods, p.Masked())
			}
		}
		nodes[n.Name] = an
	}
	for _, p := range v.Pods {
		if p == nil || p.Spec.HostNetwork {
			continue
		}
		an, ok := nodes[p.Spec.NodeName]
		if !ok {
			continue
		}
		for _, a := range cluster.PodIPs(p) {
			a = a.Unmap()
			an.Pods = append(an.Pods, netip.PrefixFrom(a, a.BitLen()))
		}
		nodes[p.Spec.NodeName] = an
	}
	return flowsync.NewAdmission(standby, nodes)
}
