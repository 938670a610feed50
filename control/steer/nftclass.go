package steer

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	gwconfig "github.com/egret-gw/egret/gateway/config"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The classification by destination, in the agent's table:
//
//	map class4 { type ipv4_addr : verdict }      # pod → goto cls-<class>
//	map class6 { type ipv6_addr : verdict }
//	map restore { type mark : verdict }          # decided mark → goto mark-<mark>
//	chain classify { type filter hook prerouting priority mangle; policy accept;
//	  ct direction original ct mark & M vmap @restore   # a decided connection keeps its mark
//	  ct direction original ip saddr vmap @class4       # otherwise its first packet decides
//	  ct direction original ip6 saddr vmap @class6
//	  iifname "egret0" ct direction reply ct mark & M vmap @restore  # and "egret-lh": replies
//	}
//	map cls-7-4 { type ipv4_addr : verdict; flags interval }  # destination → goto mark-<mark>
//	map cls-7-6 { type ipv6_addr : verdict; flags interval }
//	chain cls-7 { ip daddr vmap @cls-7-4; ip6 daddr vmap @cls-7-6 }
//	chain mark-0x30000 { meta mark set meta mark & ~M | 0x30000; ct mark set ct mark & ~M | 0x30000 }
//
// and in the forward chain, after the excluded networks' return:
//
//	meta mark & M == <drop> counter drop      # an exclusion whose object blocks
//	meta mark & M == <node> return            # leaves by the node's routing
//
// Only the connection's original direction is classified: replies to a pod
// carry the same conntrack mark but must follow the main table back. A
// connection whose mark no longer names an object (not in restore) is
// decided again. The marks only touch the bits of M, so other components'
// marks on the same packets survive.
const (
	nftClassify = "classify"
	nftClass4   = "class4"
	nftClass6   = "class6"
	nftRestore  = "restore"
	// Chain and map name prefixes of classes and marks.
	nftClassPrefix = "cls-"
	nftMarkPrefix  = "mark-"
	// nftPriorityMangle is the classify chain's: after conntrack (-200),
	// before routing.
	nftPriorityMangle = -150
)

func classChain(id uint32) string { return nftClassPrefix + strconv.FormatUint(uint64(id), 10) }

func classSetName(id uint32, f int) string {
	return classChain(id) + [2]string{"-4", "-6"}[f]
}

func markChain(mark uint32) string { return nftMarkPrefix + strconv.FormatUint(uint64(mark), 16) }

// ne is a mark as the kernel holds it in a register: host byte order.
func ne(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func (n *nftState) marks() marks {
	if n.mask == 0 {
		return marks{DefaultMarkMask}
	}
	return marks{n.mask}
}

// classSets are the fixed maps of the classification.
func classSets(t *nftables.Table) (class [2]*nftables.Set, restore *nftables.Set) {
	vmap := func(name string, key nftables.SetDatatype) *nftables.Set {
		return &nftables.Set{Table: t, Name: name, KeyType: key, IsMap: true, DataType: nftables.TypeVerdict}
	}
	return [2]*nftables.Set{vmap(nftClass4, nftables.TypeIPAddr), vmap(nftClass6, nftables.TypeIP6Addr)},
		vmap(nftRestore, nftables.TypeMark)
}

func classSet(t *nftables.Table, id uint32, f int) *nftables.Set {
	key := nftables.TypeIPAddr
	if f == 1 {
		key = nftables.TypeIP6Addr
	}
	return &nftables.Set{Table: t, Name: classSetName(id, f), KeyType: key, IsMap: true, DataType: nftables.TypeVerdict, Interval: true}
}

// setupClassify adds the fixed part of the classification to a setup
// transaction, and returns the forward chain's mark rules.
func (n *nftState) setupClassify(c *nftables.Conn, t *nftables.Table) ([][]expr.Any, error) {
	m := n.marks()
	class, restore := classSets(t)
	for _, s := range []*nftables.Set{class[0], class[1], restore} {
		if err := c.AddSet(s, nil); err != nil {
			return nil, fmt.Errorf("nftables set %s: %w", s.Name, err)
		}
	}
	for _, v := range []uint32{m.node(), m.drop()} {
		n.addMarkChain(c, t, v)
		if err := c.SetAddElements(restore, []nftables.SetElement{restoreElement(v)}); err != nil {
			return nil, fmt.Errorf("nftables set %s: %w", restore.Name, err)
		}
	}
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: nftClassify, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(nftPriorityMangle), Policy: &policy})
	c.FlushChain(ch)
	original := []expr.Any{
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(slices.Clone(original),
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(m.mask), Xor: ne(0)},
		&expr.Lookup{SourceRegister: 1, SetName: restore.Name, IsDestRegSet: true, DestRegister: 0},
	)})
	// Replies from a gateway get their connection's mark too, so that
	// reverse-path filtering (src_valid_mark, Kernel.markTunnel) finds
	// the tunnel; routing then throws the pod's address (a cluster
	// network) back to the main table.
	for _, dev := range []string{n.dev, gwconfig.LocalKernelLink} {
		name := make([]byte, unix.IFNAMSIZ)
		copy(name, dev)
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
			&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, // IP_CT_DIR_REPLY
			&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(m.mask), Xor: ne(0)},
			&expr.Lookup{SourceRegister: 1, SetName: restore.Name, IsDestRegSet: true, DestRegister: 0},
		}})
	}
	for f, fam := range nftFam {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(slices.Clone(original),
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off, Len: fam.l},
			&expr.Lookup{SourceRegister: 1, SetName: class[f].Name, IsDestRegSet: true, DestRegister: 0},
		)})
	}
	markIs := func(v uint32) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(m.mask), Xor: ne(0)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ne(v)},
		}
	}
	return [][]expr.Any{
		append(markIs(m.drop()), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}),
		append(markIs(m.node()), &expr.Verdict{Kind: expr.VerdictReturn}),
	}, nil
}

// addMarkChain (re)writes the chain that gives a packet and its
// connection the mark v, keeping the bits outside the mask.
func (n *nftState) addMarkChain(c *nftables.Conn, t *nftables.Table, v uint32) {
	m := n.marks()
	ch := c.AddChain(&nftables.Chain{Name: markChain(v), Table: t})
	c.FlushChain(ch)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(^m.mask), Xor: ne(v)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ne(^m.mask), Xor: ne(v)},
		&expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1},
	}})
}

func restoreElement(v uint32) nftables.SetElement {
	return nftables.SetElement{Key: ne(v), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: markChain(v)}}
}

// classElements are the elements of a class's map of family f.
func classElements(ivs []Interval, f int) []nftables.SetElement {
	var out []nftables.SetElement
	for _, iv := range ivs {
		if famIndex(iv.From) != f {
			continue
		}
		out = append(out, nftables.SetElement{Key: iv.From.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: markChain(iv.Mark)}})
		// Every interval has its end, even where the next one starts:
		// the kernel takes a start after an open start for an overlap.
		if next := iv.To.Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// gotoChain is the chain a verdict map element jumps to ("" if none).
func gotoChain(e nftables.SetElement) string {
	if e.VerdictData != nil {
		return e.VerdictData.Chain
	}
	// Read back, the verdict comes as the nested attributes of
	// NFTA_DATA_VERDICT: code (1) and chain (2).
	for b := e.Val; len(b) >= 4; {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ unix.NLA_F_NESTED
		if l < 4 || l > len(b) {
			return ""
		}
		if typ == unix.NFTA_VERDICT_CHAIN {
			return strings.TrimRight(string(b[4:l]), "\x00")
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return ""
}

// parseSuffix reads the number after prefix in name, in base.
func parseSuffix(name, prefix string, base int) (uint32, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, base, 32)
	return uint32(v), err == nil
}

// classRead is the classification as read back.
type classRead struct {
	pods    []ClassPod
	classes []Class // ID and Intervals
	// marks are the restore map's keys; chains the class and mark chains.
	marks  []uint32
	chains []string
}

// readClasses lists the classification's maps and chains.
func (n *nftState) readClasses(c *nftables.Conn) (classRead, error) {
	var out classRead
	t, _ := n.objects()
	class, restore := classSets(t)
	for f := range 2 {
		els, err := c.GetSetElements(class[f])
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return out, fmt.Errorf("read nftables map %s: %w", class[f].Name, err)
		}
		for _, e := range els {
			a, ok := netip.AddrFromSlice(e.Key)
			id, ok2 := parseSuffix(gotoChain(e), nftClassPrefix, 10)
			if ok && ok2 {
				out.pods = append(out.pods, ClassPod{Addr: a, Class: id})
			}
		}
	}
	els, err := c.GetSetElements(restore)
	if err != nil && !isNotFound(err) {
		return out, fmt.Errorf("read nftables map %s: %w", restore.Name, err)
	}
	for _, e := range els {
		if len(e.Key) == 4 {
			out.marks = append(out.marks, binary.NativeEndian.Uint32(e.Key))
		}
	}
	sets, err := c.GetSets(t)
	if err != nil && !isNotFound(err) {
		return out, fmt.Errorf("list nftables sets: %w", err)
	}
	byID := map[uint32]*Class{}
	for _, s := range sets {
		rest, ok := strings.CutPrefix(s.Name, nftClassPrefix)
		if !ok || len(rest) < 3 {
			continue
		}
		id, ok := parseSuffix(rest[:len(rest)-2], "", 10)
		f := slices.Index([]string{"-4", "-6"}, rest[len(rest)-2:])
		if !ok || f < 0 {
			continue
		}
		els, err := c.GetSetElements(s)
		if err != nil {
			return out, fmt.Errorf("read nftables map %s: %w", s.Name, err)
		}
		cl := byID[id]
		if cl == nil {
			cl = &Class{ID: id}
			byID[id] = cl
		}
		cl.Intervals = append(cl.Intervals, readIntervals(els, f)...)
	}
	for _, cl := range byID {
		slices.SortFunc(cl.Intervals, intervalCmp)
		out.classes = append(out.classes, *cl)
	}
	slices.SortFunc(out.classes, func(a, b Class) int { return cmp.Compare(a.ID, b.ID) })
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return out, fmt.Errorf("list nftables chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name == NFTTable && (strings.HasPrefix(ch.Name, nftClassPrefix) || strings.HasPrefix(ch.Name, nftMarkPrefix)) {
			out.chains = append(out.chains, ch.Name)
		}
	}
	slices.SortFunc(out.pods, func(a, b ClassPod) int { return a.Addr.Compare(b.Addr) })
	slices.Sort(out.marks)
	return out, nil
}

// readIntervals turns the elements of an interval map back into the
// intervals classElements made: a start runs to the next element.
func readIntervals(els []nftables.SetElement, f int) []Interval {
	type edge struct {
		a    netip.Addr
		end  bool
		mark uint32
	}
	var edges []edge
	for _, e := range els {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok || famIndex(a) != f {
			continue
		}
		v, _ := parseSuffix(gotoChain(e), nftMarkPrefix, 16)
		edges = append(edges, edge{a, e.IntervalEnd, v})
	}
	slices.SortFunc(edges, func(x, y edge) int { return edgeCmp(x.a, x.end, y.a, y.end) })
	last := netip.IPv4Unspecified()
	if f == 1 {
		last = netip.IPv6Unspecified()
	}
	last = lastAddr(netip.PrefixFrom(last, 0))
	var out []Interval
	for i, e := range edges {
		if e.end {
			continue
		}
		to := last
		if i+1 < len(edges) {
			to = edges[i+1].a.Prev()
		}
		out = append(out, Interval{From: e.a, To: to, Mark: e.mark})
	}
	return out
}

// applyClasses makes the classification match want in one transaction:
// new mark chains, then classes, then pods, then what is gone. Only what
// differs is written: a pod is an element, a class whose destinations
// changed is its maps' elements rewritten.
func (n *nftState) applyClasses(want State, have classRead) (added, updated, removed int, err error) {
	m := n.marks()
	fixed := func(v uint32) bool { return v == m.node() || v == m.drop() }
	var wantMarks []uint32
	for _, r := range want.Marks {
		wantMarks = append(wantMarks, r.Mark)
	}
	slices.Sort(wantMarks)
	wantMarks = slices.Compact(wantMarks)
	haveClass := map[uint32]Class{}
	for _, c := range have.classes {
		haveClass[c.ID] = c
	}
	wantClass := map[uint32]bool{}
	for _, c := range want.Classes {
		wantClass[c.ID] = true
	}
	podCmp := func(a, b ClassPod) int { return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Class, b.Class)) }
	addPods := missing(want.Classified, have.pods, podCmp)
	delPods := missing(have.pods, want.Classified, podCmp)
	newMarks := missing(wantMarks, have.marks, cmp.Compare[uint32])
	var oldMarks []uint32
	for _, v := range missing(have.marks, wantMarks, cmp.Compare[uint32]) {
		if !fixed(v) {
			oldMarks = append(oldMarks, v)
		}
	}
	var changed []Class
	for _, c := range want.Classes {
		if h, ok := haveClass[c.ID]; !ok || !slices.Equal(h.Intervals, c.Intervals) || !slices.Contains(have.chains, classChain(c.ID)) {
			changed = append(changed, c)
		}
	}
	var orphans []string // class and mark chains nothing wants
	for _, name := range have.chains {
		if id, ok := parseSuffix(name, nftClassPrefix, 10); ok && !wantClass[id] {
			orphans = append(orphans, name)
		}
		if v, ok := parseSuffix(name, nftMarkPrefix, 16); ok && !fixed(v) && !slices.Contains(wantMarks, v) {
			orphans = append(orphans, name)
		}
	}
	var goneSets []uint32
	for _, h := range have.classes {
		if !wantClass[h.ID] {
			goneSets = append(goneSets, h.ID)
		}
	}
	if len(addPods)+len(delPods)+len(newMarks)+len(oldMarks)+len(changed)+len(orphans)+len(goneSets) == 0 {
		return 0, 0, 0, nil
	}
	c, err := n.conn()
	if err != nil {
		return 0, 0, 0, err
	}
	t, _ := n.objects()
	class, restore := classSets(t)
	b := &nftBatch{c: c}
	for _, v := range newMarks {
		n.addMarkChain(c, t, v)
		if err := b.elements(true, restore, []nftables.SetElement{restoreElement(v)}); err != nil {
			return 0, 0, 0, fmt.Errorf("nftables map %s: %w", restore.Name, err)
		}
		added++
	}
	for _, cl := range changed {
		h, had := haveClass[cl.ID]
		for f := range 2 {
			s := classSet(t, cl.ID, f)
			if !had {
				if err := c.AddSet(s, nil); err != nil {
					return 0, 0, 0, fmt.Errorf("nftables map %s: %w", s.Name, err)
				}
			}
			if had && slices.Equal(familyOf(h.Intervals, f), familyOf(cl.Intervals, f)) {
				continue
			}
			els := classElements(cl.Intervals, f)
			c.FlushSet(s)
			if len(els) > 0 {
				if err := b.elements(true, s, els); err != nil {
					return 0, 0, 0, fmt.Errorf("nftables map %s: %w", s.Name, err)
				}
			}
		}
		if had && slices.Contains(have.chains, classChain(cl.ID)) {
			updated++
			continue
		}
		ch := c.AddChain(&nftables.Chain{Name: classChain(cl.ID), Table: t})
		c.FlushChain(ch)
		for f, fam := range nftFam {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.off + fam.l, Len: fam.l},
				&expr.Lookup{SourceRegister: 1, SetName: classSetName(cl.ID, f), IsDestRegSet: true, DestRegister: 0},
			}})
		}
		if had {
			updated++
		} else {
			added++
		}
	}
	split := func(list []ClassPod) (out [2][]nftables.SetElement) {
		for _, p := range list {
			f := famIndex(p.Addr)
			out[f] = append(out[f], nftables.SetElement{Key: p.Addr.AsSlice(), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: classChain(p.Class)}})
		}
		return out
	}
	del, add := split(delPods), split(addPods)
	for f := range 2 {
		if len(del[f]) > 0 {
			if err := b.elements(false, class[f], del[f]); err != nil {
				return 0, 0, 0, fmt.Errorf("nftables map %s: %w", class[f].Name, err)
			}
		}
		if len(add[f]) > 0 {
			if err := b.elements(true, class[f], add[f]); err != nil {
				return 0, 0, 0, fmt.Errorf("nftables map %s: %w", class[f].Name, err)
			}
		}
	}
	added += len(addPods)
	removed += len(delPods)
	// What is gone, once nothing refers to it: class chains (their rules
	// refer to their maps), their maps (which refer to mark chains), then
	// the marks.
	for _, name := range orphans {
		if strings.HasPrefix(name, nftClassPrefix) {
			ch := &nftables.Chain{Name: name, Table: t}
			c.FlushChain(ch)
			c.DelChain(ch)
		}
	}
	for _, id := range goneSets {
		for f := range 2 {
			c.DelSet(classSet(t, id, f))
		}
		removed++
	}
	for _, v := range oldMarks {
		if err := b.elements(false, restore, []nftables.SetElement{{Key: ne(v)}}); err != nil {
			return 0, 0, 0, fmt.Errorf("nftables map %s: %w", restore.Name, err)
		}
		removed++
	}
	for _, name := range orphans {
		if strings.HasPrefix(name, nftMarkPrefix) {
			ch := &nftables.Chain{Name: name, Table: t}
			c.FlushChain(ch)
			c.DelChain(ch)
		}
	}
	if err := c.Flush(); err != nil {
		return 0, 0, 0, fmt.Errorf("update the classification by destination (table inet %s): %w", NFTTable, err)
	}
	return added, updated, removed, nil
}

// familyOf are the intervals of family f.
func familyOf(ivs []Interval, f int) []Interval {
	var out []Interval
	for _, iv := range ivs {
		if famIndex(iv.From) == f {
			out = append(out, iv)
		}
	}
	return out
}

// nftBatch writes set elements in messages of a bounded size, and
// commits what it holds once that reaches what one netlink send takes
// (the socket's send buffer, 208 KiB by default): ten thousand pods do
// not fit in one. A commit in the middle is safe because every partial
// state errs on the closed side: an address selected but not yet
// classified, or a class map being filled, gives its new flows no mark,
// which the filter drops, and their next packet is decided again.
type nftBatch struct {
	c       *nftables.Conn
	pending int
}

const (
	nftChunk  = 512  // elements per message: its attributes' lengths are 16 bits
	nftCommit = 2048 // elements per commit
)

func (b *nftBatch) elements(add bool, s *nftables.Set, els []nftables.SetElement) error {
	for len(els) > 0 {
		n := min(len(els), nftChunk)
		var err error
		if add {
			err = b.c.SetAddElements(s, els[:n])
		} else {
			err = b.c.SetDeleteElements(s, els[:n])
		}
		if err != nil {
			return err
		}
		els = els[n:]
		if b.pending += n; b.pending >= nftCommit {
			if err := b.c.Flush(); err != nil {
				return err
			}
			b.pending = 0
		}
	}
	return nil
}
