package cni

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// FilterTable names the nftables table (family inet, in the pod) that enforces
// "destinations" for one egress interface: the allowed destinations and the redirects.
func FilterTable(ifName string) string { return "egress-router-" + ifName }

// tableChain is one base chain of FilterTable.
type tableChain struct {
	Name     string
	Type     nftables.ChainType
	Hook     *nftables.ChainHook
	Priority *nftables.ChainPriority
}

// tableChains are the chains of FilterTable. The filter chains hold the same rules for
// traffic the pod sends itself (output) and traffic it routes or NATs on behalf of
// others (forward), which is what a redirect is; forward also keeps the egress network
// from routing into the cluster through the pod; the nat chains do the redirects.
var tableChains = []tableChain{
	{"output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter},
	{"forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter},
	{"prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest},
	{"postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource},
}

// TableRules is what FilterTable holds for ifName, chain by chain: the destination
// filter when anything is allowed explicitly, and for redirects a DNAT per rule on
// clusterIf (the pod's previous default interface) and an SNAT to the egress address
// of their family. Empty means no table.
func TableRules(ifName, clusterIf string, s IPSettings) map[string][][]expr.Any {
	out := map[string][][]expr.Any{}
	if allowed := s.Allowed(); len(allowed) > 0 {
		rules := FilterRules(ifName, allowed)
		out["output"], out["forward"] = rules, rules
	}
	if len(s.Redirects) > 0 {
		out["forward"] = append(slices.Clone(out["forward"]), inboundRules(ifName)...)
	}
	var snat []netip.Addr
	for _, r := range s.Redirects {
		out["prerouting"] = append(out["prerouting"], dnatRule(clusterIf, r))
		i := slices.IndexFunc(s.Addresses, func(a netip.Prefix) bool { return a.Addr().Is4() == r.To.Addr().Is4() })
		if i >= 0 && !slices.Contains(snat, s.Addresses[i].Addr()) {
			snat = append(snat, s.Addresses[i].Addr())
			out["postrouting"] = append(out["postrouting"], snatRule(ifName, s.Addresses[i].Addr()))
		}
	}
	return out
}

func ifNameData(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func nfproto(a netip.Addr) byte {
	if a.Is4() {
		return unix.NFPROTO_IPV4
	}
	return unix.NFPROTO_IPV6
}

var ipProtos = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// dnatRule: iifname clusterIf, addressed to the pod (fib daddr type local), protocol and
// port of r: dnat to r's target.
func dnatRule(clusterIf string, r Redirect) []expr.Any {
	fam := nfproto(r.To.Addr())
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifNameData(clusterIf)},
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}},
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ipProtos[r.Proto]}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.Port)},
		&expr.Immediate{Register: 1, Data: r.To.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(r.ToPort)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

// ipsDstNAT is IPS_DST_NAT of the conntrack status: the connection was DNATed.
const ipsDstNAT = 1 << 5

// snatRule: a redirected connection (ct status dnat) leaving through ifName takes the
// egress address, so the target answers the egress router and not the client it
// cannot reach.
func snatRule(ifName string, egress netip.Addr) []expr.Any {
	fam := nfproto(egress)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifNameData(ifName)},
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}},
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Immediate{Register: 1, Data: egress.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(fam), RegAddrMin: 1},
	}
}

// inboundRules are the forward chain's rules for what comes in through
// ifName. Redirects turn forwarding on in the pod, which would let any host
// of the egress network route through the pod into the cluster network:
// only packets of connections already tracked (the redirected connections'
// answers) are forwarded from ifName, the rest is dropped and counted.
func inboundRules(ifName string) [][]expr.Any {
	iif := ifMatch(expr.MetaKeyIIFNAME, ifName)
	return [][]expr.Any{trackedAccept(iif), countedDrop(iif)}
}

// ifMatch matches packets whose input or output interface (key) is name.
func ifMatch(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifNameData(name)},
	}
}

// trackedAccept accepts what match selects of connections conntrack tracks
// already (ct state established,related).
func trackedAccept(match []expr.Any) []expr.Any {
	return append(slices.Clone(match),
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Verdict{Kind: expr.VerdictAccept})
}

// countedDrop counts and drops what match selects.
func countedDrop(match []expr.Any) []expr.Any {
	return append(slices.Clone(match), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
}

// FilterRules builds the chain's rules for traffic leaving through ifName: replies of
// accepted connections and IPv6 neighbour discovery pass, new connections pass only to
// the destinations, everything else is dropped (and counted).
func FilterRules(ifName string, dests []netip.Prefix) [][]expr.Any {
	match := ifMatch(expr.MetaKeyOIFNAME, ifName)
	oif := func() []expr.Any { return slices.Clone(match) }
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	rules := [][]expr.Any{trackedAccept(match)}

	// Router/neighbour solicitation and advertisement (ICMPv6 133-136) must reach the
	// gateway whatever the destinations say, or IPv6 cannot resolve the next hop.
	nd := append(oif(),
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{133}},
		&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{136}},
		accept)
	rules = append(rules, nd)

	for _, d := range dests {
		d = d.Masked()
		proto, off, n := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
		if d.Addr().Is6() {
			proto, off, n = unix.NFPROTO_IPV6, 24, 16
		}
		mask := make([]byte, n)
		for i := 0; i < d.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		r := append(oif(),
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: d.Addr().AsSlice()},
			accept)
		rules = append(rules, r)
	}
	return append(rules, countedDrop(match))
}

// podNFT opens nftables in the pod's network namespace, given by podFd. The
// nftables library takes fd 0 for "the current namespace", so a handle
// that ended up as fd 0 (stdin closed and the number reused) would put the
// pod's filter in the node's namespace: refused, as is any other fd that
// cannot be a namespace handle.
func podNFT(podFd int) (*nftables.Conn, error) {
	if podFd <= 0 {
		return nil, fmt.Errorf("opening nftables in the pod: namespace handle fd %d cannot be the pod's (fd 0 would be this process's own namespace)", podFd)
	}
	c, err := nftables.New(nftables.WithNetNSFd(podFd))
	if err != nil {
		return nil, fmt.Errorf("opening nftables in the pod: %w", err)
	}
	return c, nil
}

// InstallFilter (re)creates FilterTable in the pod's namespace with TableRules; with
// no rules there is no table.
func InstallFilter(podFd int, ifName, clusterIf string, s IPSettings) error {
	c, err := podNFT(podFd)
	if err != nil {
		return err
	}
	if err := RemoveFilter(podFd, ifName); err != nil {
		return err
	}
	rules := TableRules(ifName, clusterIf, s)
	if len(rules) == 0 {
		return nil
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: FilterTable(ifName)})
	policy := nftables.ChainPolicyAccept
	for _, tc := range tableChains {
		if len(rules[tc.Name]) == 0 {
			continue
		}
		ch := c.AddChain(&nftables.Chain{
			Name: tc.Name, Table: t, Type: tc.Type,
			Hooknum: tc.Hook, Priority: tc.Priority, Policy: &policy,
		})
		for _, r := range rules[tc.Name] {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the destinations filter (nftables table inet %s): %w", FilterTable(ifName), err)
	}
	return nil
}

// RemoveFilter deletes the filter table if it exists.
func RemoveFilter(podFd int, ifName string) error {
	c, err := podNFT(podFd)
	if err != nil {
		return err
	}
	t, err := findFilter(c, ifName)
	if err != nil || t == nil {
		return err
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting nftables table inet %s: %w", t.Name, err)
	}
	return nil
}

// TableRuleCounts returns how many rules each chain of FilterTable holds (chains
// that do not exist are absent); nil when the table is absent.
func TableRuleCounts(podFd int, ifName string) (map[string]int, error) {
	c, err := podNFT(podFd)
	if err != nil {
		return nil, err
	}
	t, err := findFilter(c, ifName)
	if err != nil || t == nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing the chains of table inet %s: %w", t.Name, err)
	}
	out := map[string]int{}
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("listing rules of chain %s in table inet %s: %w", ch.Name, t.Name, err)
		}
		out[ch.Name] = len(rules)
	}
	return out, nil
}

func findFilter(c *nftables.Conn, ifName string) (*nftables.Table, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables in the pod: %w", err)
	}
	for _, t := range tables {
		if t.Name == FilterTable(ifName) {
			return t, nil
		}
	}
	return nil, nil
}
