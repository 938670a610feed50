package gateway

import "sync"

// A flow's return path — which node to tunnel replies to, and with which
// tunnel type and VNI — is kept in the flow's 32-bit conntrack Aux: the
// interned VTEP index of the node (vtepBits) and the interned index of the
// (tunnel, VNI) pair (tunnelBits). 32 bits is what keeps a conntrack entry
// in one cache line.
const (
	vtepBits   = 20
	tunnelBits = 32 - vtepBits
	// MaxTunnelIDs bounds how many distinct (tunnel type, VNI) pairs a
	// pipeline ever numbers. A cluster uses one or a few; a new flow with a
	// pair past the limit is dropped as DropTunnelIDs.
	MaxTunnelIDs = 1 << tunnelBits
)

// tunnelID is an encapsulation a pod's packets came with, echoed on replies.
type tunnelID struct {
	kind Tunnel
	vni  uint32
}

// tunnelTable numbers tunnelIDs for the life of the pipeline. Numbers are
// handed out under mu; ids[i] is written before number i is handed out and
// never changes, so the reply path reads it without the lock (the number
// reaches another worker only through the flow table, whose locks order the
// write before the read).
type tunnelTable struct {
	mu  sync.Mutex
	of  map[tunnelID]uint32
	ids [MaxTunnelIDs]tunnelID
}

// number returns id's number, giving it the next one if it has none; false
// if all MaxTunnelIDs numbers are taken.
func (tt *tunnelTable) number(id tunnelID) (uint32, bool) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if n, ok := tt.of[id]; ok {
		return n, true
	}
	if len(tt.of) >= MaxTunnelIDs {
		return 0, false
	}
	n := uint32(len(tt.of))
	tt.ids[n] = id
	if tt.of == nil {
		tt.of = make(map[tunnelID]uint32)
	}
	tt.of[id] = n
	return n, true
}

// tunnelNumber is number with a one-entry cache per worker: a worker sees
// the same pair on almost every new flow, so the lock is taken about once.
func (w *Worker) tunnelNumber(id tunnelID) (uint32, bool) {
	if w.tunOK && w.tun == id {
		return w.tunNum, true
	}
	n, ok := w.p.tunnels.number(id)
	if ok {
		w.tun, w.tunNum, w.tunOK = id, n, true
	}
	return n, ok
}

// packAux packs a flow's return path: the node's interned VTEP index and the
// number of its (tunnel, VNI) pair.
func packAux(vtep, tunnel uint32) uint32 { return vtep<<tunnelBits | tunnel }

func unpackAux(a uint32) (vtep, tunnel uint32) { return a >> tunnelBits, a & (MaxTunnelIDs - 1) }
