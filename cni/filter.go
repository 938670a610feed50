package cni

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// FilterTable names the nftables table (family inet, in the pod) that enforces
// "destinations" for one egress interface.
func FilterTable(ifName string) string { return "egress-router-" + ifName }

// FilterChains are the chains inside FilterTable: traffic the pod sends itself
// (output) and traffic it routes or NATs on behalf of others, as an egress router
// pod in redirect mode does (forward). Both carry the same rules.
var FilterChains = []struct {
	Name string
	Hook *nftables.ChainHook
}{{"output", nftables.ChainHookOutput}, {"forward", nftables.ChainHookForward}}

// FilterRules builds the chain's rules for traffic leaving through ifName: replies of
// accepted connections and IPv6 neighbour discovery pass, new connections pass only to
// the destinations, everything else is dropped (and counted).
func FilterRules(ifName string, dests []netip.Prefix) [][]expr.Any {
	oif := func() []expr.Any {
		name := make([]byte, unix.IFNAMSIZ)
		copy(name, ifName)
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		}
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	var rules [][]expr.Any

	established := append(oif(),
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		accept)
	rules = append(rules, established)

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
	drop := append(oif(), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
	return append(rules, drop)
}

// InstallFilter (re)creates the destination filter in the pod's namespace.
func InstallFilter(podFd int, ifName string, dests []netip.Prefix) error {
	c, err := nftables.New(nftables.WithNetNSFd(podFd))
	if err != nil {
		return fmt.Errorf("opening nftables in the pod: %w", err)
	}
	if err := RemoveFilter(podFd, ifName); err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: FilterTable(ifName)})
	policy := nftables.ChainPolicyAccept
	for _, fc := range FilterChains {
		ch := c.AddChain(&nftables.Chain{
			Name: fc.Name, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: fc.Hook, Priority: nftables.ChainPriorityFilter, Policy: &policy,
		})
		for _, r := range FilterRules(ifName, dests) {
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
	c, err := nftables.New(nftables.WithNetNSFd(podFd))
	if err != nil {
		return fmt.Errorf("opening nftables in the pod: %w", err)
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

// FilterRuleCount returns how many rules each filter chain holds, or -1 when the
// table is absent; chains that differ in size are reported as an error.
func FilterRuleCount(podFd int, ifName string) (int, error) {
	c, err := nftables.New(nftables.WithNetNSFd(podFd))
	if err != nil {
		return 0, fmt.Errorf("opening nftables in the pod: %w", err)
	}
	t, err := findFilter(c, ifName)
	if err != nil || t == nil {
		return -1, err
	}
	n := -1
	for _, fc := range FilterChains {
		rules, err := c.GetRules(t, &nftables.Chain{Name: fc.Name, Table: t})
		if err != nil {
			return 0, fmt.Errorf("listing rules of chain %s in table inet %s: %w", fc.Name, t.Name, err)
		}
		if n >= 0 && len(rules) != n {
			return 0, fmt.Errorf("table inet %s: chain %s has %d rules, the others %d", t.Name, fc.Name, len(rules), n)
		}
		n = len(rules)
	}
	return n, nil
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
