package steer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	gwconfig "github.com/egret-gw/egret/gateway/config"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nftState is the agent's fail-closed filter, one inet table:
//
//	table inet egret-steer {
//	  set sel4 { type ipv4_addr }                  # local pods selected by an EgressIP
//	  set sel6 { type ipv6_addr }
//	  set allow4 { type ipv4_addr }                # local pods no EgressIP selects
//	  set allow6 { type ipv6_addr }
//	  set pods4 { type ipv4_addr; flags interval } # the node's pod CIDRs (failClosed: podCIDR)
//	  set pods6 { type ipv6_addr; flags interval }
//	  set peers4 { type ipv4_addr }                # gateway VTEPs (the FDB's destinations)
//	  set peers6 { type ipv6_addr }
//	  set tunports { type inet_service }           # 4789, 6081 and the configured port
//	  chain input { type filter hook input priority -10; policy accept;
//	    ip saddr != @peers4 udp dport 4789 @th,96,24 100 counter drop   # VXLAN of our VNI (port, VNI configured)
//	    ip6 saddr != @peers6 udp dport 4789 @th,96,24 100 counter drop
//	  }
//	  chain forward { type filter hook forward priority -10; policy accept;
//	    ip saddr @pods4 ip daddr @peers4 udp dport @tunports counter drop  # also @sel4, @allow4
//	    ip6 saddr @pods6 ip6 daddr @peers6 udp dport @tunports counter drop
//	    ip daddr 10.128.0.0/14 return          # one per excluded network
//	    ip saddr @sel4 oifname != "egret0" oifname != "egret-lh" counter drop
//	    ip6 saddr @sel6 oifname != "egret0" oifname != "egret-lh" counter drop
//	    ip saddr @pods4 ip saddr != @allow4 ip daddr != @pods4 oifname != "egret0" oifname != "egret-lh" counter drop
//	    ip6 saddr @pods6 ip6 saddr != @allow6 ip6 daddr != @pods6 oifname != "egret0" oifname != "egret-lh" counter drop
//	  }
//	  chain postrouting { type nat hook postrouting priority srcnat - 10; policy accept;
//	    oifname { "egret0", "egret-lh" } snat ip to ip saddr     # keep the pod's own source
//	    oifname { "egret0", "egret-lh" } snat ip6 to ip6 saddr
//	  }
//	}
//
// A drop in any base chain is final, so other tables accepting the packet
// cannot let it out. The rules never change with the inputs, only the sets
// do: Setup can rewrite the chain at every start without losing what an
// earlier agent put in the sets, and an address in sel is dropped whatever
// allow says, so the order of set changes inside Apply cannot open a gap.
//
// The input chain keeps the tunnel device's VXLAN to the gateways: a frame
// of the tunnel's VNI from any other address would otherwise be decapsulated
// into egret0 and reach the pods as if a gateway had sent it. Only our VNI is
// matched, so a CNI sharing the port (Calico VXLAN uses 4789 too) is left
// alone. The pod rules of the forward chain come before the excluded
// networks (gateways are in the node networks): a pod must not send its own
// tunnel frames to a gateway, whose anti-spoofing trusts the outer source
// once the node masquerades it.
//
// The postrouting chain keeps the pod's source on what steer sends to a
// gateway: a CNI that masquerades every pod packet leaving its network
// whatever the interface (flannel's --ip-masq: `-s <cluster CIDR> !
// -d 224.0.0.0/4 -j MASQUERADE` at srcnat) would give the gateway the
// node's address instead of the pod's. The kernel runs one NAT binding per
// connection and direction, made by the first nat chain that translates:
// this one, before the CNI's, maps the source to itself, so the CNI's
// masquerade never runs on those connections.
type nftState struct {
	ns   netns.NsHandle
	dev  string
	port uint16 // the tunnel's UDP port
	vni  uint32
	// mask are the mark bits of the classification by destination
	// (nftclass.go); 0 means DefaultMarkMask.
	mask uint32
}

const (
	nftChain    = "forward"
	nftInput    = "input"
	nftPeers4   = "peers4"
	nftPeers6   = "peers6"
	nftPorts    = "tunports"
	nftSet4     = "sel4"
	nftSet6     = "sel6"
	nftAllow4   = "allow4"
	nftAllow6   = "allow6"
	nftPods4    = "pods4"
	nftPods6    = "pods6"
	nftPriority = -10
	nftNAT      = "postrouting"
	// Rule tags (user data) of the drop rules, for the counters.
	tagSelected     = "egret:selected"
	tagUnclassified = "egret:unclassified"
	// tagTunnelSource tags the input drop of tunnel frames from a
	// non-gateway, tagPodTunnel the forward drop of a pod's tunnel frames
	// to a gateway.
	tagTunnelSource = "egret:tunnel-source"
	tagPodTunnel    = "egret:pod-tunnel"
)

// tunnelPorts are the UDP ports a pod may not send to a gateway on: VXLAN
// and Geneve, whatever the agent's own tunnel is (the gateway may serve
// either).
var tunnelPorts = []uint16{4789, 6081}

// nftSets are the table's sets.
type nftSets struct {
	sel, allow, pods, peers [2]*nftables.Set // [0] IPv4, [1] IPv6
	ports                   *nftables.Set
}

func (n *nftState) conn() (*nftables.Conn, error) {
	var c *nftables.Conn
	var err error
	if n.ns.IsOpen() {
		c, err = nftables.New(nftables.WithNetNSFd(int(n.ns)))
	} else {
		c, err = nftables.New()
	}
	if err != nil {
		return nil, fmt.Errorf("open nftables: %w", err)
	}
	return c, nil
}

func (n *nftState) objects() (*nftables.Table, nftSets) {
	t := &nftables.Table{Name: NFTTable, Family: nftables.TableFamilyINet}
	set := func(name string, key nftables.SetDatatype, interval bool) *nftables.Set {
		return &nftables.Set{Table: t, Name: name, KeyType: key, Interval: interval}
	}
	return t, nftSets{
		sel:   [2]*nftables.Set{set(nftSet4, nftables.TypeIPAddr, false), set(nftSet6, nftables.TypeIP6Addr, false)},
		allow: [2]*nftables.Set{set(nftAllow4, nftables.TypeIPAddr, false), set(nftAllow6, nftables.TypeIP6Addr, false)},
		pods:  [2]*nftables.Set{set(nftPods4, nftables.TypeIPAddr, true), set(nftPods6, nftables.TypeIP6Addr, true)},
		peers: [2]*nftables.Set{set(nftPeers4, nftables.TypeIPAddr, false), set(nftPeers6, nftables.TypeIP6Addr, false)},
		ports: set(nftPorts, nftables.TypeInetService, false),
	}
}

// family constants per set index: NFPROTO, source address offset and length.
var nftFam = [2]struct {
	proto byte
	off   uint32 // source address; the destination follows it
	l     uint32
}{{unix.NFPROTO_IPV4, 12, 4}, {unix.NFPROTO_IPV6, 8, 16}}

// setup creates the table and sets if missing and replaces the chain's
// rules, all in one transaction: set elements survive, and there is no
// moment without the drop rules.
func (n *nftState) setup(excluded []netip.Prefix) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	t, sets := n.objects()
	c.AddTable(t)
	for _, group := range [][2]*nftables.Set{sets.sel, sets.allow, sets.pods, sets.peers} {
		for _, s := range group {
			if err := c.AddSet(s, nil); err != nil {
				return fmt.Errorf("nftables set %s: %w", s.Name, err)
			}
		}
	}
	if err := c.AddSet(sets.ports, nil); err != nil {
		return fmt.Errorf("nftables set %s: %w", sets.ports.Name, err)
	}
	c.FlushSet(sets.ports)
	var ports []nftables.SetElement
	for _, p := range slices.Compact(slices.Sorted(slices.Values(append([]uint16{n.port}, tunnelPorts...)))) {
		if p != 0 {
			ports = append(ports, nftables.SetElement{Key: binary.BigEndian.AppendUint16(nil, p)})
		}
	}
	if err := c.SetAddElements(sets.ports, ports); err != nil {
		return fmt.Errorf("nftables set %s: %w", sets.ports.Name, err)
	}
	policy := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{Name: nftInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(nftPriority), Policy: &policy})
	c.FlushChain(in)
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	if n.port != 0 {
		for f, fam := range nftFam {
			e := append(n.ourVXLAN(fam.proto),
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
				&expr.Lookup{SourceRegister: 1, SetName: sets.peers[f].Name, Invert: true},
			)
			c.AddRule(&nftables.Rule{Table: t, Chain: in, UserData: []byte(tagTunnelSource), Exprs: append(e, drop...)})
		}
	}
	ch := c.AddChain(&nftables.Chain{Name: nftChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(nftPriority), Policy: &policy})
	c.FlushChain(ch)
	// Pods' tunnel frames to a gateway, before the excluded networks return.
	for f, fam := range nftFam {
		for _, src := range []*nftables.Set{sets.pods[f], sets.sel[f], sets.allow[f]} {
			e := append(udpOf(fam.proto),
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 1, SetName: sets.ports.Name},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off + fam.l, Len: fam.l},
				&expr.Lookup{SourceRegister: 1, SetName: sets.peers[f].Name},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
				&expr.Lookup{SourceRegister: 1, SetName: src.Name},
			)
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: []byte(tagPodTunnel), Exprs: append(e, drop...)})
		}
	}
	// Pods' frames of the tunnel's own VNI to any node: on a gateway node a
	// pod's traffic may leave masqueraded as the node, a gateway VTEP the
	// workers' input rule trusts, and would reach their egret0 (issue 33).
	if n.port != 0 {
		for f, fam := range nftFam {
			for _, src := range []*nftables.Set{sets.pods[f], sets.sel[f], sets.allow[f]} {
				e := append(n.ourVXLAN(fam.proto),
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
					&expr.Lookup{SourceRegister: 1, SetName: src.Name},
				)
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: []byte(tagPodTunnel), Exprs: append(e, drop...)})
			}
		}
	}
	markRules, err := n.setupClassify(c, t)
	if err != nil {
		return err
	}
	for _, p := range excluded {
		off, l := uint32(16), uint32(4)
		proto := byte(unix.NFPROTO_IPV4)
		if p.Addr().Is6() {
			off, l, proto = 24, 16, unix.NFPROTO_IPV6
		}
		mask := net.CIDRMask(p.Bits(), p.Addr().BitLen())
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: l},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: l, Mask: mask, Xor: make([]byte, l)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
			&expr.Verdict{Kind: expr.VerdictReturn},
		}})
	}
	dev := make([]byte, unix.IFNAMSIZ)
	copy(dev, n.dev)
	local := make([]byte, unix.IFNAMSIZ)
	copy(local, gwconfig.LocalKernelLink)
	notTunnel := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: dev},
		// Nor to this node's own gateway, through its local port.
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: local},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
	// Traffic classified by destination that is dropped (counted with the
	// selected pods') or leaves by the node, past the excluded networks.
	for _, e := range markRules {
		tag := []byte(nil)
		if slices.ContainsFunc(e, func(x expr.Any) bool { _, ok := x.(*expr.Counter); return ok }) {
			tag = []byte(tagSelected)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: tag, Exprs: e})
	}
	// Selected pods first: their drop does not depend on allow.
	for f, fam := range nftFam {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: []byte(tagSelected), Exprs: append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
			&expr.Lookup{SourceRegister: 1, SetName: sets.sel[f].Name},
		}, notTunnel...)})
	}
	for f, fam := range nftFam {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, UserData: []byte(tagUnclassified), Exprs: append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
			&expr.Lookup{SourceRegister: 1, SetName: sets.pods[f].Name},
			&expr.Lookup{SourceRegister: 1, SetName: sets.allow[f].Name, Invert: true},
			// Pods of this node reach each other even without clusterCIDRs.
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off + fam.l, Len: fam.l},
			&expr.Lookup{SourceRegister: 1, SetName: sets.pods[f].Name, Invert: true},
		}, notTunnel...)})
	}
	nat := c.AddChain(&nftables.Chain{Name: nftNAT, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 10), Policy: &policy})
	c.FlushChain(nat)
	for _, out := range [][]byte{dev, local} {
		for _, fam := range nftFam {
			c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: out},
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
				&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(fam.proto), RegAddrMin: 1},
			}})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table inet %s: %w", NFTTable, err)
	}
	return nil
}

// ourVXLAN matches UDP of family proto to the tunnel's port whose VXLAN
// header carries the tunnel's VNI: only the VNI, not the port alone, so a
// CNI's own VXLAN on the same port (Calico, 4789) is not matched.
func (n *nftState) ourVXLAN(proto byte) []expr.Any {
	return append(udpOf(proto),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, n.port)},
		// VXLAN header after the 8-byte UDP header: flags, 3 reserved, VNI.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 12, Len: 3},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint32(nil, n.vni)[1:]},
	)
}

// nftRead is the content of the sets.
type nftRead struct {
	selected, allowed, peers []netip.Addr
	pods                     []netip.Prefix
	classes                  classRead
}

// read lists the addresses and networks in the sets.
func (n *nftState) read() (nftRead, error) {
	var out nftRead
	c, err := n.conn()
	if err != nil {
		return out, err
	}
	_, sets := n.objects()
	for f := range 2 {
		for _, s := range []struct {
			set  *nftables.Set
			into *[]netip.Addr
		}{{sets.sel[f], &out.selected}, {sets.allow[f], &out.allowed}, {sets.peers[f], &out.peers}} {
			els, err := c.GetSetElements(s.set)
			if err != nil {
				if isNotFound(err) {
					continue
				}
				return out, fmt.Errorf("read nftables set %s: %w", s.set.Name, err)
			}
			for _, e := range els {
				if a, ok := netip.AddrFromSlice(e.Key); ok {
					*s.into = append(*s.into, a)
				}
			}
		}
		els, err := c.GetSetElements(sets.pods[f])
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return out, fmt.Errorf("read nftables set %s: %w", sets.pods[f].Name, err)
		}
		out.pods = append(out.pods, intervalPrefixes(els)...)
	}
	if out.classes, err = n.readClasses(c); err != nil {
		return out, err
	}
	return out, nil
}

// intervalElements are the elements of an interval set holding p: its
// first address and, unless p reaches the last address of its family, the
// address after it flagged as the interval's end.
func intervalElements(p netip.Prefix) []nftables.SetElement {
	p = p.Masked()
	out := []nftables.SetElement{{Key: p.Addr().AsSlice()}}
	if next := lastAddr(p).Next(); next.IsValid() {
		out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
	}
	return out
}

// intervalPrefixes turns interval set elements back into the prefixes
// intervalElements made; ranges that are not one prefix are left out (the
// agent never writes them, and Apply rewrites a set it does not recognise).
func intervalPrefixes(els []nftables.SetElement) []netip.Prefix {
	type edge struct {
		a   netip.Addr
		end bool
	}
	var edges []edge
	for _, e := range els {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			edges = append(edges, edge{a, e.IntervalEnd})
		}
	}
	slices.SortFunc(edges, func(x, y edge) int { return edgeCmp(x.a, x.end, y.a, y.end) })
	var out []netip.Prefix
	for i, e := range edges {
		if e.end {
			continue
		}
		var next netip.Addr // invalid: the range runs to the family's last address
		if i+1 < len(edges) && edges[i+1].end {
			next = edges[i+1].a
		}
		for bits := 0; bits <= e.a.BitLen(); bits++ {
			p := netip.PrefixFrom(e.a, bits)
			if p.Masked().Addr() == e.a && lastAddr(p).Next() == next {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// lastAddr is the highest address in p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// nftChange is one transaction on the sets.
type nftChange struct {
	addSel, delSel, addAllow, delAllow []netip.Addr
	// addPeers and delPeers change the gateway VTEPs the tunnel accepts.
	addPeers, delPeers []netip.Addr
	// setPods replaces the pod networks with pods.
	setPods bool
	pods    []netip.Prefix
}

func (ch nftChange) empty() bool {
	return len(ch.addSel)+len(ch.delSel)+len(ch.addAllow)+len(ch.delAllow)+len(ch.addPeers)+len(ch.delPeers) == 0 && !ch.setPods
}

// apply changes the sets in one transaction, the kernel seeing all of it
// or none of it, unless it is too large for one (nftBatch): then in
// commits of the same order, each state between them safe.
func (n *nftState) apply(ch nftChange) error {
	if ch.empty() {
		return nil
	}
	c, err := n.conn()
	if err != nil {
		return err
	}
	_, sets := n.objects()
	b := &nftBatch{c: c}
	split := func(list []netip.Addr) (out [2][]nftables.SetElement) {
		for _, a := range list {
			out[famIndex(a)] = append(out[famIndex(a)], nftables.SetElement{Key: a.AsSlice()})
		}
		return
	}
	addSel, delSel, addAllow, delAllow := split(ch.addSel), split(ch.delSel), split(ch.addAllow), split(ch.delAllow)
	addPeers, delPeers := split(ch.addPeers), split(ch.delPeers)
	var pods [2][]nftables.SetElement
	for _, p := range normalizePrefixes(ch.pods) {
		pods[famIndex(p.Addr())] = append(pods[famIndex(p.Addr())], intervalElements(p)...)
	}
	for f := range 2 {
		for _, op := range []struct {
			set *nftables.Set
			els []nftables.SetElement
			add bool
		}{{sets.sel[f], addSel[f], true}, {sets.allow[f], delAllow[f], false},
			{sets.allow[f], addAllow[f], true}, {sets.sel[f], delSel[f], false},
			{sets.peers[f], addPeers[f], true}, {sets.peers[f], delPeers[f], false}} {
			if len(op.els) == 0 {
				continue
			}
			err = b.elements(op.add, op.set, op.els)
			if err != nil {
				return fmt.Errorf("nftables set %s: %w", op.set.Name, err)
			}
		}
		if ch.setPods {
			c.FlushSet(sets.pods[f])
			if len(pods[f]) > 0 {
				if err := b.elements(true, sets.pods[f], pods[f]); err != nil {
					return fmt.Errorf("nftables set %s: %w", sets.pods[f].Name, err)
				}
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("update the fail-closed filter (table inet %s): %w", NFTTable, err)
	}
	return nil
}

// counters sums the packet counters of the rules in chains by their tag
// (the rule's UserData).
func (n *nftState) counters(chains ...string) (map[string]uint64, error) {
	c, err := n.conn()
	if err != nil {
		return nil, err
	}
	t, _ := n.objects()
	sums := map[string]uint64{}
	for _, name := range chains {
		rules, err := c.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if err != nil {
			return nil, fmt.Errorf("read nftables chain %s: %w", name, err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ctr, ok := e.(*expr.Counter); ok {
					sums[string(r.UserData)] += ctr.Packets
				}
			}
		}
	}
	return sums, nil
}

// drops sums the counters of the drop rules: packets of selected pods, and
// of pod addresses not classified yet, that tried to leave outside the
// tunnel.
func (n *nftState) drops() (selected, unclassified uint64, err error) {
	sums, err := n.counters(nftChain)
	return sums[tagSelected], sums[tagUnclassified], err
}

// tunnelDrops sums the counters of the tunnel rules: frames of the
// tunnel's VNI from an address that is no gateway (input), and pods' tunnel
// frames to a gateway (forward).
func (n *nftState) tunnelDrops() (source, pod uint64, err error) {
	sums, err := n.counters(nftInput, nftChain)
	return sums[tagTunnelSource], sums[tagPodTunnel], err
}

func (n *nftState) remove() error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	t, _ := n.objects()
	c.DelTable(t)
	if err := c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove nftables table inet %s: %w", NFTTable, err)
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, unix.ENOENT)
}

// udpOf starts a rule matching UDP of the family nfproto (NFPROTO_IPV4/6).
func udpOf(nfproto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
	}
}

// edgeCmp orders the edges of interval elements read back from the
// kernel by address; where one interval ends at the next one's start, the
// end comes first.
func edgeCmp(a netip.Addr, aEnd bool, b netip.Addr, bEnd bool) int {
	if c := a.Compare(b); c != 0 {
		return c
	}
	switch {
	case aEnd == bEnd:
		return 0
	case aEnd:
		return -1
	}
	return 1
}
