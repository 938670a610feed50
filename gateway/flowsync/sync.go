package flowsync

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
)

// Defaults of Config.
const (
	DefaultInterval   = 100 * time.Millisecond
	DefaultWindow     = 4 << 20
	DefaultStallAfter = 5 * time.Second
	// DefaultMaxConns bounds the authenticated sessions the listener
	// holds at once; more are closed and counted refused.
	DefaultMaxConns = 64
	// DefaultMaxPending bounds the connections still in their handshake,
	// and DefaultMaxPendingPerSource those of one source address: a host
	// without the key holds at most this many, each for at most
	// pendingFor, and never an authenticated session's slot.
	DefaultMaxPending          = 16
	DefaultMaxPendingPerSource = 2
	// DefaultMaxPeerFlows bounds the flows held for one peer.
	DefaultMaxPeerFlows = 1 << 20
)

// pendingFor is how long a connection may take to prove the key: its
// TLS handshake and sync handshake together in the TLS mode, and the wait
// for its first byte (sniffFor) as well in the transition.
const pendingFor = 2 * time.Second

// sniffFor is how long a listener in the transition (Key and TLS) waits
// for a client's first byte to tell which it speaks: a TLS client sends
// its ClientHello at once, a key-mode client (the previous release's)
// nothing until it is greeted. Far above a ClientHello's way across a
// cluster, it delays each key-mode session's start by as much, once. A
// ClientHello later than that (lost and sent again) gets the key's
// greeting, and that client opens its session again with the key.
const sniffFor = 300 * time.Millisecond

// batchBytes is the size at which a batch is sealed and sent.
const batchBytes = 60 << 10

// Config configures a Sync.
type Config struct {
	// Node is this gateway's node name, told to the peers it sends to: in
	// the TLS mode the node its certificate was issued to, or the
	// standbys refuse it (peer_identity).
	Node string
	// Key is the pre-shared key (LoadKey), at least MinKeyLen bytes: a
	// host without it can neither send flows here nor read ours. At least
	// one of Key and TLS is set; both is the upgrade's transition (see
	// TLS).
	Key []byte
	// TLS authenticates both sides of every session by per-node
	// certificates (mutual TLS): the peer's node name is the one its
	// certificate was issued to, not a claim. With Key as well, gateways
	// of the previous release, which speak only the key, are still
	// served and sent to: the listener takes both kinds of client, and a
	// session to a standby that answers with the key's greeting is opened
	// again with the key (docs/continuity.md, "Moving from the shared key
	// to node certificates").
	TLS *TLS
	// Pipeline is the data plane whose flows are sent and into which
	// peers' flows are adopted.
	Pipeline *gateway.Pipeline
	// Clock is the pipeline's monotonic clock (engine.Engine.Now).
	Clock func() int64
	// Source, if valid, is the address sessions to standbys are opened
	// from: the node's own (its InternalIP). Left to the kernel, the source
	// may be an egress IP claimed on the same interface (IPv6 source
	// selection can prefer it), whose packets the data plane takes, so the
	// standby's answers would never reach the socket.
	Source netip.Addr
	// Interval is how often the flow table is scanned for changes
	// (DefaultInterval); a change reaches the standby about this late.
	Interval time.Duration
	// Window bounds the bytes sent to one peer and not yet acknowledged
	// (DefaultWindow): past it nothing more is sent to that peer, and the
	// changes wait in the flow table itself, not in memory.
	Window int
	// StallAfter: a peer that acknowledges nothing for this long while
	// data waits (DefaultStallAfter) is dropped and gets a full resync
	// once it is back.
	StallAfter time.Duration
	// Admission returns what the cluster allows peers to send here now
	// (the gateway agent builds it from its view; see Admission). It is
	// asked at each handshake and batch, so it must be cheap; nil or a nil
	// result refuses every session.
	Admission func() *Admission
	// MaxPeerFlows bounds the flows held for one peer
	// (DefaultMaxPeerFlows); its records beyond are refused and counted.
	MaxPeerFlows int
	Log          *slog.Logger
}

// TLS is the per-node identity of a Sync: mutual TLS with certificates the
// cluster issued to each gateway node (control/identity).
type TLS struct {
	// Server is the listener's configuration: it requires a client
	// certificate and verifies its chain (ClientAuth
	// RequireAndVerifyClientCert); a session without a verified chain is
	// refused (peer_identity).
	Server *tls.Config
	// Client is the configuration of sessions to standbys: it presents
	// this node's certificate and verifies the standby's chain. Its
	// ServerName is set, for each session, to the dialed host.
	Client *tls.Config
	// PeerNode names the gateway node a verified leaf certificate was
	// issued to, or says why it is not a gateway's.
	PeerNode func(leaf *x509.Certificate) (string, error)
}

// Sync sends the flows of the egress IPs this gateway hosts to each IP's
// standby (SetPeers) and holds the flows its peers send here (Listen).
type Sync struct {
	cfg Config
	c   counters

	mu    sync.Mutex
	links map[string]*link         // by peer address
	byIP  map[conntrack.Addr]*link // egress IP hosted here → its standby's link
	held  map[string]*heldSet      // flows held for each peer node (receiver.go)
	ln    net.Listener             // nil until Listen
	conns map[net.Conn]struct{}    // the listener's open connections
	// the listener's connections in their handshake, in all and by source
	// address, and its authenticated sessions (receiver.go)
	pending   int
	pendingBy map[netip.Addr]int
	sessions  int
	lastWarn  time.Time // of the last refusal logged (rate limit)
	done      chan struct{}
	wg        sync.WaitGroup
	rmu       sync.Mutex // serialises applying peers' batches

	// scan goroutine only (sender.go)
	seen    map[conntrack.Addr]*link // byIP as the last scan saw it
	visit   []uint64                 // the slots this scan looks at for every link, a bit each
	walk    []uint64                 // visit and the slots of the looks at every slot under way
	sweepAt int                      // the next slot the sweep looks at
}

// New checks cfg and returns a Sync; Start begins sending.
func New(cfg Config) (*Sync, error) {
	switch {
	case cfg.TLS != nil && (cfg.TLS.Server == nil || cfg.TLS.Client == nil || cfg.TLS.PeerNode == nil):
		return nil, errors.New("flow sync: per-node TLS needs the listener's and the client's TLS configurations and PeerNode")
	case cfg.TLS == nil && len(cfg.Key) == 0:
		return nil, errors.New("flow sync needs a pre-shared key or per-node TLS to authenticate its peers")
	case len(cfg.Key) > 0 && len(cfg.Key) < MinKeyLen:
		return nil, fmt.Errorf("flow sync key has %d bytes; use at least %d", len(cfg.Key), MinKeyLen)
	case cfg.Pipeline == nil || cfg.Clock == nil:
		return nil, errors.New("flow sync needs the pipeline and its clock")
	case cfg.Node == "" || len(cfg.Node) > maxNameLen:
		return nil, fmt.Errorf("flow sync: node name %q: give this node's name", cfg.Node)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	if cfg.MaxPeerFlows <= 0 {
		cfg.MaxPeerFlows = DefaultMaxPeerFlows
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Sync{cfg: cfg, links: map[string]*link{}, byIP: map[conntrack.Addr]*link{},
		held: map[string]*heldSet{}, conns: map[net.Conn]struct{}{}, pendingBy: map[netip.Addr]int{}, done: make(chan struct{})}, nil
}

// Stats returns the counters.
func (s *Sync) Stats() Stats { return s.c.snapshot() }

// Start begins the scans that send flows to the peers SetPeers names.
func (s *Sync) Start() {
	s.wg.Add(1)
	go s.scanLoop()
}

// SetPeers names, for each egress IP hosted here, the sync address
// (host:port) of its standby; IPs left out have no standby. Flows of an IP
// that leaves are forgotten here without telling its old standby, which
// may be taking it over.
func (s *Sync) SetPeers(peers map[netip.Addr]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return
	default:
	}
	byIP := make(map[conntrack.Addr]*link, len(peers))
	for ip, addr := range peers {
		l := s.links[addr]
		if l == nil {
			l = &link{s: s, addr: addr, stop: make(chan struct{})}
			s.links[addr] = l
			s.wg.Add(1)
			go l.connect()
		}
		byIP[conntrack.Addr(ip.Unmap().As16())] = l
	}
	for addr, l := range s.links {
		used := false
		for _, m := range byIP {
			used = used || m == l
		}
		if !used {
			close(l.stop)
			l.drop()
			delete(s.links, addr)
		}
	}
	s.byIP = byIP
}

// Close stops sending and listening and waits for every goroutine.
func (s *Sync) Close() error {
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return nil
	default:
	}
	close(s.done)
	for _, l := range s.links {
		close(l.stop)
		l.drop()
	}
	s.links, s.byIP = nil, nil
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}
