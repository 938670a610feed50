package engine

import (
	"encoding/binary"
	"fmt"
	"github.com/egret-gw/egret/gateway/xdp"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// NFTable is the nftables table (family inet) the gateway installs when an
// interface runs on the AF_PACKET fallback. AF_PACKET sees a copy of every
// frame while the kernel still gets the original; without these drops the
// kernel would answer the steered traffic itself (TCP resets and port
// unreachables for the egress IPs, port unreachables for the tunnel).
const NFTable = "egret-gateway"

// steerDrops builds the prerouting rules: everything to a hosted egress IP,
// and UDP to the tunnel ports of a local VTEP, is dropped (and counted)
// before the kernel's IP stack sees it.
func steerDrops(vteps, hosted []netip.Addr) [][]expr.Any {
	daddr := func(a netip.Addr) []expr.Any {
		proto, off, n := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
		if a.Is6() {
			proto, off, n = unix.NFPROTO_IPV6, 24, 16
		}
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
		}
	}
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	var rules [][]expr.Any
	for _, a := range hosted {
		rules = append(rules, append(daddr(a), drop...))
	}
	for _, v := range vteps {
		for _, p := range []uint16{xdp.PortVXLAN, xdp.PortGeneve} {
			port := make([]byte, 2)
			binary.BigEndian.PutUint16(port, p)
			r := append(daddr(v),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port})
			rules = append(rules, append(r, drop...))
		}
	}
	return rules
}

// installDrops replaces the table with drops for vteps and hosted; with
// install false it only removes the table (also one a killed run left).
func (e *Engine) installDrops(install bool, vteps, hosted []netip.Addr) error {
	c, err := nftables.New() // the current namespace: no setns, no CAP_SYS_ADMIN
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nftables: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == NFTable {
			c.DelTable(t)
		}
	}
	if install {
		t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: NFTable})
		policy := nftables.ChainPolicyAccept
		ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &policy})
		for _, r := range steerDrops(vteps, hosted) {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: table inet %s: %w", NFTable, err)
	}
	return nil
}
