package steer

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nftState is the agent's fail-closed filter, one inet table:
//
//	table inet egret-steer {
//	  set sel4 { type ipv4_addr }   # local pods selected by an EgressIP
//	  set sel6 { type ipv6_addr }
//	  chain forward { type filter hook forward priority -10; policy accept;
//	    ip daddr 10.128.0.0/14 return          # one per excluded network
//	    ip saddr @sel4 oifname != "egret0" counter drop
//	    ip6 saddr @sel6 oifname != "egret0" counter drop
//	  }
//	}
//
// A drop in any base chain is final, so other tables accepting the packet
// cannot let it out.
type nftState struct {
	ns  netns.NsHandle
	dev string
}

const (
	nftChain    = "forward"
	nftSet4     = "sel4"
	nftSet6     = "sel6"
	nftPriority = -10
)

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

func (n *nftState) objects() (*nftables.Table, *nftables.Set, *nftables.Set) {
	t := &nftables.Table{Name: NFTTable, Family: nftables.TableFamilyINet}
	s4 := &nftables.Set{Table: t, Name: nftSet4, KeyType: nftables.TypeIPAddr}
	s6 := &nftables.Set{Table: t, Name: nftSet6, KeyType: nftables.TypeIP6Addr}
	return t, s4, s6
}

// setup creates the table, sets and chain if missing and replaces the
// chain's rules, all in one transaction: set elements survive, and there is
// no moment without the drop rules.
func (n *nftState) setup(excluded []netip.Prefix) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	t, s4, s6 := n.objects()
	c.AddTable(t)
	if err := c.AddSet(s4, nil); err != nil {
		return fmt.Errorf("nftables set %s: %w", nftSet4, err)
	}
	if err := c.AddSet(s6, nil); err != nil {
		return fmt.Errorf("nftables set %s: %w", nftSet6, err)
	}
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: nftChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(nftPriority), Policy: &policy})
	c.FlushChain(ch)
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
	for _, s := range []struct {
		set   *nftables.Set
		proto byte
		off   uint32
		l     uint32
	}{{s4, unix.NFPROTO_IPV4, 12, 4}, {s6, unix.NFPROTO_IPV6, 8, 16}} {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{s.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: s.off, Len: s.l},
			&expr.Lookup{SourceRegister: 1, SetName: s.set.Name},
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: dev},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table inet %s: %w", NFTTable, err)
	}
	return nil
}

// selected lists the addresses in both sets.
func (n *nftState) selected() ([]netip.Addr, error) {
	c, err := n.conn()
	if err != nil {
		return nil, err
	}
	_, s4, s6 := n.objects()
	var out []netip.Addr
	for _, s := range []*nftables.Set{s4, s6} {
		els, err := c.GetSetElements(s)
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("read nftables set %s: %w", s.Name, err)
		}
		for _, e := range els {
			if a, ok := netip.AddrFromSlice(e.Key); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// update adds and removes set elements in one transaction.
func (n *nftState) update(add, del []netip.Addr) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	_, s4, s6 := n.objects()
	split := func(list []netip.Addr) (v4, v6 []nftables.SetElement) {
		for _, a := range list {
			if a.Is4() {
				v4 = append(v4, nftables.SetElement{Key: a.AsSlice()})
			} else {
				v6 = append(v6, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		return
	}
	a4, a6 := split(add)
	d4, d6 := split(del)
	for _, op := range []struct {
		set *nftables.Set
		add []nftables.SetElement
		del []nftables.SetElement
	}{{s4, a4, d4}, {s6, a6, d6}} {
		if len(op.add) > 0 {
			if err := c.SetAddElements(op.set, op.add); err != nil {
				return fmt.Errorf("nftables set %s: %w", op.set.Name, err)
			}
		}
		if len(op.del) > 0 {
			if err := c.SetDeleteElements(op.set, op.del); err != nil {
				return fmt.Errorf("nftables set %s: %w", op.set.Name, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("update the fail-closed filter (table inet %s): %w", NFTTable, err)
	}
	return nil
}

// drops sums the counters of the drop rules: packets of selected pods that
// tried to leave outside the tunnel.
func (n *nftState) drops() (uint64, error) {
	c, err := n.conn()
	if err != nil {
		return 0, err
	}
	t, _, _ := n.objects()
	rules, err := c.GetRules(t, &nftables.Chain{Name: nftChain, Table: t})
	if err != nil {
		return 0, fmt.Errorf("read nftables chain %s: %w", nftChain, err)
	}
	var sum uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				sum += ctr.Packets
			}
		}
	}
	return sum, nil
}

func (n *nftState) remove() error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	t, _, _ := n.objects()
	c.DelTable(t)
	if err := c.Flush(); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove nftables table inet %s: %w", NFTTable, err)
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, unix.ENOENT)
}
