package flowsync

import (
	"net/netip"
	"slices"
)

// Admission is the cluster's word, as the gateway agent reads it, on what
// peers may send here. The receiver never reads the cluster itself: the
// agent builds an Admission from its view (Config.Admission) and the
// receiver checks every record against it, so that holding the key is not
// enough to plant flows here.
type Admission struct {
	// Standby maps each egress IP this node stands by for (the EgressIP's
	// standby annotation names this node) to the node its status places it
	// on: only that node's records of it are applied.
	Standby map[netip.Addr]string
	// Nodes are the cluster's nodes by name.
	Nodes map[string]AdmitNode

	byVTEP map[netip.Addr]string          // VTEP → node name
	pods   map[string]map[netip.Addr]bool // node → its single pod addresses
}

// AdmitNode is what the receiver checks of one node.
type AdmitNode struct {
	// Addrs are the node's own addresses (InternalIP): a peer that names
	// itself this node must connect from one of them.
	Addrs []netip.Addr
	// VTEPs are the node's tunnel addresses: a return path must name one.
	VTEPs []netip.Addr
	// Pods are the node's pod address ranges (its podCIDRs) and pod
	// addresses (single-address prefixes): a flow's source must be in one.
	Pods []netip.Prefix
}

// NewAdmission returns the Admission of standby and nodes, indexed for the
// receiver's look-ups. The maps become the Admission's.
func NewAdmission(standby map[netip.Addr]string, nodes map[string]AdmitNode) *Admission {
	a := &Admission{Standby: map[netip.Addr]string{}, Nodes: nodes,
		byVTEP: map[netip.Addr]string{}, pods: map[string]map[netip.Addr]bool{}}
	for ip, n := range standby {
		a.Standby[ip.Unmap()] = n
	}
	for name, n := range nodes {
		for _, v := range n.VTEPs {
			a.byVTEP[v.Unmap()] = name
		}
		one := map[netip.Addr]bool{}
		for _, p := range n.Pods {
			if p.IsSingleIP() {
				one[p.Addr().Unmap()] = true
			}
		}
		a.pods[name] = one
	}
	return a
}

// Refusal is why a record or session from a peer was refused.
type Refusal uint8

// Reasons of a refusal (the reason label of egret_gateway_sync_refusals_total).
const (
	// RefusedUnknownIP: the record's egress IP is not one this node stands by for.
	RefusedUnknownIP Refusal = iota
	// RefusedWrongPeer: this node stands by for the IP, but the peer is not the node hosting it.
	RefusedWrongPeer
	// RefusedUnknownVTEP: the return path names no known node's VTEP.
	RefusedUnknownVTEP
	// RefusedPodOutsideNode: the flow's source is not a pod address of the VTEP's node.
	RefusedPodOutsideNode
	// RefusedPeerFull: the peer holds its maximum of flows here (Config.MaxPeerFlows).
	RefusedPeerFull
	// RefusedPeerAddress: a session whose peer names a node it does not connect from.
	RefusedPeerAddress
	// RefusedPeerIdentity: a TLS session whose peer names another node
	// than its certificate's, or presents a certificate that is not a
	// gateway node's.
	RefusedPeerIdentity
	// NumRefusals is the number of reasons.
	NumRefusals
)

var refusalNames = [NumRefusals]string{"unknown_ip", "wrong_peer", "unknown_vtep", "pod_outside_node", "peer_full", "peer_address", "peer_identity"}

// String is the reason's metric label.
func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return "unknown"
}

// peerAt reports whether node name connects from addr.
func (a *Admission) peerAt(name string, addr netip.Addr) bool {
	n, ok := a.Nodes[name]
	return ok && slices.Contains(n.Addrs, addr.Unmap())
}

// record checks one flow record of peer: its egress IP (ip), the VTEP of
// its return path and its pod source. ok when it may be applied.
func (a *Admission) record(peer string, ip, vtep, src netip.Addr, checkPath bool) (Refusal, bool) {
	host, ok := a.Standby[ip.Unmap()]
	switch {
	case !ok:
		return RefusedUnknownIP, false
	case host != peer:
		return RefusedWrongPeer, false
	case !checkPath:
		return 0, true
	}
	node, ok := a.byVTEP[vtep.Unmap()]
	if !ok {
		return RefusedUnknownVTEP, false
	}
	src = src.Unmap()
	if a.pods[node][src] {
		return 0, true
	}
	for _, p := range a.Nodes[node].Pods {
		if !p.IsSingleIP() && p.Contains(src) {
			return 0, true
		}
	}
	return RefusedPodOutsideNode, false
}
