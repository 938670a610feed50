package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/config"
)

// AdmitTable is the nftables table (family inet) of the admission filter
// (config.Spec.Admission): in the input hook, TCP to each guarded port is
// accepted from loopback and from the port's sources, and dropped and
// counted (a counter object named after the listener) from anywhere else.
const AdmitTable = "egret-admit"

// admitInput is the base chain; each listener has a regular chain and a
// counter object of its own name.
const admitInput = "input"

// admitState is what this process made of AdmitTable: the chains and
// counters exist from the first install until the table is removed, so a
// change flushes and refills the chains in one transaction and the
// counters keep counting.
type admitState struct {
	live bool            // the table exists, made by this process
	made map[string]bool // listener chains and counters in it
}

// admit brings AdmitTable in line with set.Admission in one nftables
// transaction: no packet ever meets a half-filled table. Nil removes it.
func (e *Engine) admit(set *config.Settled) error {
	c, err := nftables.New() // the current namespace: no setns
	if err != nil {
		return fmt.Errorf("engine: nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: AdmitTable}
	if !e.adm.live {
		// Whatever a previous process left goes in the same transaction.
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return fmt.Errorf("engine: nftables: list tables: %w", err)
		}
		for _, o := range tables {
			if o.Name == AdmitTable {
				c.DelTable(o)
			}
		}
	}
	if set.Admission == nil {
		if e.adm.live {
			c.DelTable(t)
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("engine: nftables: removing table inet %s: %w", AdmitTable, err)
		}
		e.adm = admitState{}
		return nil
	}
	made := map[string]bool{}
	input := &nftables.Chain{Name: admitInput, Table: t}
	if e.adm.live {
		c.FlushChain(input)
		for name := range e.adm.made {
			c.FlushChain(&nftables.Chain{Name: name, Table: t})
			made[name] = true
		}
	} else {
		c.AddTable(t)
		policy := nftables.ChainPolicyAccept
		input = c.AddChain(&nftables.Chain{Name: admitInput, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policy})
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	for _, a := range set.Admission {
		ch := &nftables.Chain{Name: a.Name, Table: t}
		if !made[a.Name] {
			c.AddObj(&nftables.CounterObj{Table: t, Name: a.Name})
			c.AddChain(ch)
			made[a.Name] = true
		}
		for _, r := range admitRules(a) {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
		port := make([]byte, 2)
		binary.BigEndian.PutUint16(port, a.Port)
		c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: a.Name},
		}})
	}
	if err := c.Flush(); err != nil {
		e.adm = admitState{} // the next install starts from a fresh table
		return fmt.Errorf("engine: nftables: table inet %s: %w", AdmitTable, err)
	}
	e.adm = admitState{live: true, made: made}
	return nil
}

// admitRules are a listener chain's rules: accept each source prefix,
// then count and drop.
func admitRules(a config.Admit) [][]expr.Any {
	var rules [][]expr.Any
	for _, p := range a.From {
		proto, off, n := byte(unix.NFPROTO_IPV4), uint32(12), uint32(4)
		if p.Addr().Is6() {
			proto, off, n = unix.NFPROTO_IPV6, 8, 16
		}
		r := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		}
		if p.Bits() < p.Addr().BitLen() {
			mask := netip.PrefixFrom(p.Addr(), p.Bits())
			r = append(r, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n,
				Mask: prefixMask(mask), Xor: make([]byte, n)})
		}
		r = append(r, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
			&expr.Verdict{Kind: expr.VerdictAccept})
		rules = append(rules, r)
	}
	return append(rules, []expr.Any{
		&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: a.Name},
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

// prefixMask is p's netmask as bytes of its address length.
func prefixMask(p netip.Prefix) []byte {
	m := make([]byte, p.Addr().BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// ifname is an interface name as the kernel compares it (IFNAMSIZ bytes).
func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

// AdmissionDrops returns how many packets the admission filter dropped for
// the listener name since this process installed it (0 when it is not
// installed): egret_gateway_admission_drops_total.
func (e *Engine) AdmissionDrops(name string) (uint64, error) {
	e.mu.Lock()
	live := e.adm.live && e.adm.made[name]
	e.mu.Unlock()
	if !live {
		return 0, nil
	}
	c, err := nftables.New()
	if err != nil {
		return 0, fmt.Errorf("engine: nftables: %w", err)
	}
	o, err := c.GetObject(&nftables.CounterObj{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: AdmitTable}, Name: name})
	if err != nil {
		return 0, fmt.Errorf("engine: nftables: counter %s of table inet %s: %w", name, AdmitTable, err)
	}
	co, ok := o.(*nftables.CounterObj)
	if !ok {
		return 0, errors.New("engine: nftables: counter " + name + " of table inet " + AdmitTable + " is not a counter")
	}
	return co.Packets, nil
}
