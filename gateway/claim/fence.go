package claim

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// FenceTable is the name of the two nftables tables (families arp and
// inet) that keep the kernel mute for every claimed egress IP. They are
// kernel state, not process state: a gateway killed with -9, by a panic or
// by the OOM killer leaves them behind with its claims, so its kernel never
// answers ARP or neighbour solicitations for those IPs, never takes TCP, UDP
// or ICMP to them, and never sends from them. While the gateway lives, its
// Responder answers ARP and neighbour solicitations itself, from user
// space, so the kernel never needs to. An IP leaves the tables only when it
// is released (Release, ReleaseMarked).
const FenceTable = "egret-fence"

// Set names in the fence tables.
const (
	fenceSet4 = "claimed4"
	fenceSet6 = "claimed6"
)

// nfArpIn and nfArpOut are the arp family's hooks (NF_ARP_IN, NF_ARP_OUT):
// nftables.ChainHookInput is the inet family's number, which in the arp
// family means output.
var (
	nfArpIn  = nftables.ChainHookRef(0)
	nfArpOut = nftables.ChainHookRef(1)
)

// fence is the claimer's handle on the fence tables of its namespace.
type fence struct {
	c     *nftables.Conn
	arp   *nftables.Table
	inet  *nftables.Table
	arp4  *nftables.Set // arp table: claimed IPv4 addresses
	inet4 *nftables.Set
	inet6 *nftables.Set
}

// openFence creates the fence tables in ns (the current namespace if ns is
// not open) unless they exist.
func openFence(ns netns.NsHandle) (*fence, error) {
	var opts []nftables.ConnOption
	if ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("claim: nftables: %w", err)
	}
	f := &fence{c: c}
	if err := f.setup(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return f, nil
}

// setup creates the tables and sets unless they exist and (re)writes the
// rules, in one transaction; the sets, which are the state, are kept.
func (f *fence) setup() error {
	c := f.c
	f.arp = c.AddTable(&nftables.Table{Family: nftables.TableFamilyARP, Name: FenceTable})
	f.inet = c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: FenceTable})
	f.arp4 = &nftables.Set{Table: f.arp, Name: fenceSet4, KeyType: nftables.TypeIPAddr}
	f.inet4 = &nftables.Set{Table: f.inet, Name: fenceSet4, KeyType: nftables.TypeIPAddr}
	f.inet6 = &nftables.Set{Table: f.inet, Name: fenceSet6, KeyType: nftables.TypeIP6Addr}
	for _, s := range []*nftables.Set{f.arp4, f.inet4, f.inet6} {
		if err := c.AddSet(s, nil); err != nil {
			return fmt.Errorf("nftables set %s: %w", s.Name, err)
		}
	}
	// Before conntrack (-200) and the raw table (-300): nothing else
	// sees traffic to a fenced IP.
	prio := nftables.ChainPriorityRef(-350)
	accept := nftables.ChainPolicyAccept
	chain := func(t *nftables.Table, name string, hook *nftables.ChainHook, p *nftables.ChainPriority) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: p, Policy: &accept})
		c.FlushChain(ch)
		return ch
	}
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	rule := func(ch *nftables.Chain, e ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: append(e, drop...)})
	}
	// ARP: the target address of what comes in (requests, replies,
	// gratuitous ARPs of the IP's new owner), the sender address of what
	// the kernel would send.
	arpIn := chain(f.arp, "in", nfArpIn, nftables.ChainPriorityFilter)
	arpOut := chain(f.arp, "out", nfArpOut, nftables.ChainPriorityFilter)
	rule(arpIn, arpLookup(24, f.arp4)...)
	rule(arpOut, arpLookup(14, f.arp4)...)
	// IP: anything to (prerouting) or from (output) a fenced address, and
	// neighbour solicitations and advertisements about one (they go to
	// the solicited-node multicast address, not to the IP).
	pre := chain(f.inet, "prerouting", nftables.ChainHookPrerouting, prio)
	out := chain(f.inet, "output", nftables.ChainHookOutput, prio)
	rule(pre, ipLookup(unix.NFPROTO_IPV4, 16, 4, f.inet4)...)
	rule(pre, ipLookup(unix.NFPROTO_IPV6, 24, 16, f.inet6)...)
	rule(pre, ndLookup(f.inet6)...)
	rule(out, ipLookup(unix.NFPROTO_IPV4, 12, 4, f.inet4)...)
	rule(out, ipLookup(unix.NFPROTO_IPV6, 8, 16, f.inet6)...)
	rule(out, ndLookup(f.inet6)...)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables tables %s (arp, inet): %w", FenceTable, err)
	}
	return nil
}

// arpLookup matches an Ethernet/IPv4 ARP packet whose address at off (14
// sender, 24 target) is in s.
func arpLookup(off uint32, s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 0, Len: 6},
		// hardware Ethernet, protocol IPv4, lengths 6 and 4
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 1, 8, 0, 6, 4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// ipLookup matches a packet of family proto whose address at off is in s.
func ipLookup(proto byte, off, n uint32, s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// ndLookup matches a neighbour solicitation or advertisement whose target
// is in s.
func ndLookup(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{135}},
		&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{136}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 8, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

// sets returns the fence sets that hold ip.
func (f *fence) sets(ip netip.Addr) []*nftables.Set {
	if ip.Is4() {
		return []*nftables.Set{f.arp4, f.inet4}
	}
	return []*nftables.Set{f.inet6}
}

// add fences ip: from now on the kernel neither answers for it nor sends
// from it.
func (f *fence) add(ip netip.Addr) error {
	err := f.addElements(ip)
	if errors.Is(err, syscall.ENOENT) {
		// Another claimer of this namespace found the tables empty and
		// deleted them as it closed: make them again.
		if err := f.setup(); err != nil {
			return fmt.Errorf("fence %s: %w", ip, err)
		}
		err = f.addElements(ip)
	}
	return err
}

func (f *fence) addElements(ip netip.Addr) error {
	for _, s := range f.sets(ip) {
		if err := f.c.SetAddElements(s, []nftables.SetElement{{Key: ip.AsSlice()}}); err != nil {
			return fmt.Errorf("fence %s: %w", ip, err)
		}
	}
	if err := f.c.Flush(); err != nil {
		return fmt.Errorf("fence %s in nftables tables %s: %w", ip, FenceTable, err)
	}
	return nil
}

// remove lifts the fence of ip; an IP not fenced is not an error.
func (f *fence) remove(ip netip.Addr) error {
	var errs []error
	for _, s := range f.sets(ip) {
		// One element per batch: deleting an absent one fails its batch.
		if err := f.c.SetDeleteElements(s, []nftables.SetElement{{Key: ip.AsSlice()}}); err != nil {
			return fmt.Errorf("unfence %s: %w", ip, err)
		}
		if err := f.c.Flush(); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unfence %s in nftables table %s %s: %w", ip, familyName(s.Table.Family), FenceTable, err))
		}
	}
	return errors.Join(errs...)
}

// fenced lists every fenced IP.
func (f *fence) fenced() ([]netip.Addr, error) {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, s := range []*nftables.Set{f.arp4, f.inet4, f.inet6} {
		els, err := f.c.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("list nftables set %s %s %s: %w", familyName(s.Table.Family), FenceTable, s.Name, err)
		}
		for _, e := range els {
			if a, ok := netip.AddrFromSlice(e.Key); ok && !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// dropIfEmpty deletes the fence tables when they fence nothing, so a
// gateway that released everything leaves no trace.
func (f *fence) dropIfEmpty() error {
	ips, err := f.fenced()
	if err != nil || len(ips) > 0 {
		return err
	}
	f.c.DelTable(f.arp)
	f.c.DelTable(f.inet)
	if err := f.c.Flush(); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("delete nftables tables %s: %w", FenceTable, err)
	}
	return nil
}

func familyName(f nftables.TableFamily) string {
	if f == nftables.TableFamilyARP {
		return "arp"
	}
	return "inet"
}
