package gwagent

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
)

// Standbys returns, for each egress IP in hosted, the address of its
// standby gateway (the node the controller names in the EgressIP's
// egret.io/standby annotation, at cluster.NodeAddress: where its flow sync
// listens). IPs without a standby, whose standby is this node or a node the
// view lacks an address for are left out; an unreadable annotation is an
// error and its object's IPs are left out.
func Standbys(v cluster.View, node string, hosted []netip.Addr) (map[netip.Addr]netip.Addr, []error) {
	addrs := make(map[string]netip.Addr, len(v.Nodes))
	for _, n := range v.Nodes {
		if n == nil {
			continue
		}
		if a, ok := cluster.NodeAddress(n); ok {
			addrs[n.Name] = a
		}
	}
	out := map[netip.Addr]netip.Addr{}
	var errs []error
	for _, e := range v.EgressIPs {
		if e == nil {
			continue
		}
		m, err := egressv1.Standbys(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for ip, sb := range m {
			if sb == node || !slices.Contains(hosted, ip) {
				continue
			}
			if a, ok := addrs[sb]; ok {
				out[ip] = a
			} else {
				errs = append(errs, fmt.Errorf("EgressIP %s: standby %s of %v has no address (no such Node, or neither an InternalIP nor interface subnets)", e.Name, sb, ip))
			}
		}
	}
	return out, errs
}

// publishStandbys tells OnStandbys the standbys of the egress IPs the
// running configuration hosts, when they changed.
func (a *Agent) publishStandbys(l *loop, v cluster.View) {
	if a.OnStandbys == nil || l.dp == nil {
		return
	}
	var hosted []netip.Addr
	if !l.fenced {
		hosted = hostedOf(l.applied)
	}
	m, errs := Standbys(v, a.Node, hosted)
	if p := joinErrs(errs); p != l.lastStandbyErr {
		for _, e := range errs {
			a.Log.Warn("gateway agent: standby skipped", "problem", e.Error())
		}
		l.lastStandbyErr = p
	}
	if l.standbys != nil && maps.Equal(m, l.standbys) {
		return
	}
	l.standbys = m
	a.OnStandbys(maps.Clone(m))
}

// SyncPeers is where the flow sync sends the flows of each egress IP: its
// standby (Standbys) at the port of syncAddr, this node's own sync address,
// since every gateway listens on the same port; defaultPort where syncAddr
// names none or port 0.
func SyncPeers(standbys map[netip.Addr]netip.Addr, syncAddr string, defaultPort int) map[netip.Addr]string {
	port := strconv.Itoa(defaultPort)
	if _, p, err := net.SplitHostPort(syncAddr); err == nil && p != "0" {
		port = p
	}
	peers := make(map[netip.Addr]string, len(standbys))
	for ip, sb := range standbys {
		peers[ip] = net.JoinHostPort(sb.String(), port)
	}
	return peers
}
