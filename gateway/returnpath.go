package gateway

import (
	"sync"
	"sync/atomic"
)

// A flow's return path — which node to tunnel replies to, and with which
// tunnel type and VNI — is kept in the flow's 32-bit conntrack Aux: the
// interned VTEP index of the node (vtepBits) and the interned index of the
// (tunnel, VNI) pair (tunnelBits). 32 bits is what keeps a conntrack entry
// in one cache line.
const (
	vtepBits   = 20
	tunnelBits = 32 - vtepBits
	// MaxTunnelIDs bounds how many distinct (tunnel type, VNI) pairs a
	// pipeline ever numbers. Only configured pairs are numbered (at Swap),
	// so it is reached only by reconfiguring thousands of times; Swap then
	// fails and asks for a restart.
	MaxTunnelIDs = 1 << tunnelBits
	// MaxTunnels bounds the (tunnel type, VNI) pairs one configuration
	// accepts (Config.Tunnels). A cluster uses one or a few.
	MaxTunnels = 64
)

// TunnelVNI is one encapsulation a gateway accepts: a tunnel type and a VNI.
type TunnelVNI struct {
	Tunnel Tunnel
	VNI    uint32
}

// tunnelID is an encapsulation a pod's packets came with, echoed on replies.
type tunnelID struct {
	kind Tunnel
	vni  uint32
}

// key packs id into 32 bits (a VNI has 24).
func (id tunnelID) key() uint32 { return uint32(id.kind)<<24 | id.vni&(1<<24-1) }

// tunnelSlots is the size of tunnelTable's open-addressing index: twice
// the numbers it can hold, so a probe always meets an empty slot soon.
const tunnelSlots = 2 * MaxTunnelIDs

// tunnelTable numbers tunnelIDs for the life of the pipeline, without a lock
// for pairs already numbered: a processor meeting a pair other than its last
// one (a cluster mixing VXLAN and Geneve, or several VNIs) looks it up in
// slots with atomic loads. Only Swap numbers pairs (those its snapshot
// accepts), under mu; packets only look numbers up. ids[n] is written
// before slot for number n is published and never changes afterwards, so the
// reply path reads it without the lock too (a number reaches another processor
// only through the flow table, after it was published).
type tunnelTable struct {
	mu    sync.Mutex    // serialises numbering
	count atomic.Uint32 // numbers handed out
	slots [tunnelSlots]atomic.Uint64
	ids   [MaxTunnelIDs]tunnelID
}

// A slot is 0 while empty, else key<<32 | slotUsed | number.
const slotUsed = 1 << 31

func tunnelHome(k uint32) uint32 { return (k * 0x9E3779B1) >> (32 - tunnelBits - 1) }

// find returns the number of the pair with key k, if it has one.
func (tt *tunnelTable) find(k uint32) (uint32, bool) {
	for i := tunnelHome(k); ; i = (i + 1) & (tunnelSlots - 1) {
		v := tt.slots[i].Load()
		if v == 0 {
			return 0, false
		}
		if uint32(v>>32) == k {
			return uint32(v) &^ slotUsed, true
		}
	}
}

// number returns id's number, giving it the next one if it has none; false
// if all MaxTunnelIDs numbers are taken.
func (tt *tunnelTable) number(id tunnelID) (uint32, bool) {
	k := id.key()
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if n, ok := tt.find(k); ok {
		return n, true
	}
	n := tt.count.Load()
	if n >= MaxTunnelIDs {
		return 0, false
	}
	tt.ids[n] = id
	i := tunnelHome(k)
	for tt.slots[i].Load() != 0 {
		i = (i + 1) & (tunnelSlots - 1)
	}
	tt.slots[i].Store(uint64(k)<<32 | slotUsed | uint64(n))
	tt.count.Store(n + 1)
	return n, true
}

// tunnelNumber is find with a one-entry cache per processor: a processor
// sees the same pair on almost every new flow. A pair without a number was
// not accepted by any installed snapshot.
func (pr *Processor) tunnelNumber(id tunnelID) (uint32, bool) {
	if pr.tunOK && pr.tun == id {
		return pr.tunNum, true
	}
	n, ok := pr.p.tunnels.find(id.key())
	if ok {
		pr.tun, pr.tunNum, pr.tunOK = id, n, true
	}
	return n, ok
}

// packAux packs a flow's return path: the node's interned VTEP index and the
// number of its (tunnel, VNI) pair.
func packAux(vtep, tunnel uint32) uint32 { return vtep<<tunnelBits | tunnel }

func unpackAux(a uint32) (vtep, tunnel uint32) { return a >> tunnelBits, a & (MaxTunnelIDs - 1) }
