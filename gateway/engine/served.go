package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/hostsubnet"
	"github.com/egret-gw/egret/internal/nsenter"
)

// Which interfaces the engine serves, and on which one it claims each
// egress IP. The configuration names the interfaces; one that does not
// exist yet (a second NIC that appears later) is opened when it does,
// without a restart, and so is one a reload adds. An egress IP is claimed
// on the served interface that holds its subnet, the one the controller
// placed it by (config.EgressIPSubnets, internal/hostsubnet.Pick), and on
// no other. When the controller placed it by the subnet of an interface
// the configuration does not name (OVN-Kubernetes' host-cidrs list every
// interface), that interface is served too, as the controller's choice.
// Without any interface holding the subnet the IP is refused, logged, and
// left out of Hosted (the egret_gateway_egress_ips gauge), until an
// interface or address appears that holds it.

// claimAll brings the claims in line with set: each hosted egress IP on
// the interface placeIP picks, released from any other. An interface that
// holds a placed IP's subnet and is not served yet is opened first (see
// above); one that failed to open is tried again only with retry (a
// reload, the periodic look), not on every link change.
func (e *Engine) claimAll(set *config.Settled, retry bool) error {
	served := e.servedPrefixes()
	want := make(map[netip.Addr]string, len(set.Hosted))
	for _, a := range set.Hosted {
		ifname, why, other := e.placeIP(set, served, a)
		if other != "" {
			if prev, failed := e.autoFailed[other]; failed && !retry {
				why += "; serving it failed: " + prev
			} else if err := e.addInterface(other, set); err != nil {
				e.autoFailed[other] = err.Error()
				why += "; serving it failed: " + err.Error()
			} else {
				delete(e.autoFailed, other)
				e.log.Info("engine: serving an interface the configuration does not name: it holds the subnet the controller placed an egress IP by", "interface", other, "ip", a)
				served = e.servedPrefixes()
				ifname, why, _ = e.placeIP(set, served, a)
			}
		}
		if ifname == "" {
			if e.unplaced[a] != why {
				e.log.Warn("engine: egress IP not claimed: "+why, "ip", a)
			}
			e.unplaced[a] = why
			continue
		}
		if _, was := e.unplaced[a]; was {
			e.log.Info("engine: egress IP can be claimed now", "ip", a, "interface", ifname)
			delete(e.unplaced, a)
		}
		want[a] = ifname
	}
	for a := range e.unplaced {
		if !slices.Contains(set.Hosted, a) {
			delete(e.unplaced, a)
		}
	}
	var errs []error
	for a, ifname := range e.claimed {
		if want[a] == ifname {
			continue
		}
		if err := e.claimer.Release(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.claimed, a)
		e.log.Info("engine: released egress IP", "ip", a, "interface", ifname)
	}
	for _, a := range set.Hosted {
		ifname, ok := want[a]
		if !ok {
			continue
		}
		if _, ok := e.claimed[a]; ok {
			continue // on ifname, or its release above failed: retried on the next pass
		}
		if err := e.claimer.Claim(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		e.claimed[a] = ifname
		e.log.Info("engine: claimed egress IP", "ip", a, "interface", ifname)
	}
	return errors.Join(errs...) // each names the claim or release that failed
}

// ifPrefix is an interface address with its mask, and its interface.
type ifPrefix struct {
	ifname string
	p      netip.Prefix
}

// servedPrefixes lists the subnets of the served interfaces, in the order
// they were opened (configuration order first): what the gateway agent
// publishes as the node's host-cidrs (global unicast, not a host prefix,
// so not a claimed IP). The local port is not one.
func (e *Engine) servedPrefixes() []ifPrefix {
	var out []ifPrefix
	for _, ifc := range e.ifcs {
		if ifc.Name != config.LocalPortLink {
			out = append(out, e.subnetsOf(ifc.Name)...)
		}
	}
	return out
}

// subnetsOf lists the subnets of interface name, none if it is gone.
func (e *Engine) subnetsOf(name string) []ifPrefix {
	l, err := e.nl.LinkByName(name)
	if err != nil {
		return nil
	}
	addrs, err := e.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil
	}
	var out []ifPrefix
	for _, ad := range addrs {
		p, ok := prefixOf(ad.IPNet)
		if !ok {
			continue
		}
		a, _ := netip.AddrFromSlice(ad.IP)
		p = netip.PrefixFrom(a.Unmap(), p.Bits())
		if p.Addr().IsGlobalUnicast() && p.Bits() < p.Addr().BitLen() {
			out = append(out, ifPrefix{name, p})
		}
	}
	return out
}

func (e *Engine) open(name string) bool {
	return slices.ContainsFunc(e.ifcs, func(i *nic.Interface) bool { return i.Name == name })
}

// placeIP returns the served interface to claim a on, or "" and why not.
// With the controller's subnet for a (set.EgressIPSubnets) that is the
// interface holding that subnet: the very address when it is there, else
// one on the same subnet (a cloud subnet is given masked); other names an
// existing interface that is not served and holds it. Without it,
// hostsubnet.Pick chooses among the served subnets, as the controller
// would from what the agent publishes, and no other interface is offered.
func (e *Engine) placeIP(set *config.Settled, served []ifPrefix, a netip.Addr) (ifname, why, other string) {
	p, placed := set.EgressIPSubnets[a]
	if !placed {
		all := make([]netip.Prefix, len(served))
		for i, s := range served {
			all[i] = s.p
		}
		q, ok := hostsubnet.Pick(netip.Prefix{}, netip.Prefix{}, all, a)
		if !ok {
			why, _ := e.unservedWhy(set, netip.Prefix{}, a)
			return "", why, ""
		}
		p = q
	}
	for _, s := range served {
		if s.p == p {
			return s.ifname, "", ""
		}
	}
	for _, s := range served {
		if s.p.Bits() == p.Bits() && s.p.Masked() == p.Masked() {
			return s.ifname, "", ""
		}
	}
	why, other = e.unservedWhy(set, p, a)
	return "", why, other
}

// unservedWhy says why no served interface takes a (of subnet p when
// valid): an interface the gateway does not serve has it (returned as
// other when the configuration does not name it), or none here.
func (e *Engine) unservedWhy(set *config.Settled, p netip.Prefix, a netip.Addr) (why, other string) {
	addrs, _ := e.nl.AddrList(nil, netlink.FAMILY_ALL) // one dump: a node has many links (pods' veths)
	for _, ad := range addrs {
		q, ok := prefixOf(ad.IPNet)
		if !ok || q.Bits() == q.Addr().BitLen() || !q.Addr().IsGlobalUnicast() ||
			!((p.IsValid() && q.Bits() == p.Bits() && q == p.Masked()) || (!p.IsValid() && hostsubnet.Hostable(q, a))) {
			continue
		}
		l, err := e.nl.LinkByIndex(ad.LinkIndex)
		if err != nil {
			continue
		}
		name := l.Attrs().Name
		switch {
		case e.open(name):
			continue
		case slices.Contains(set.Interfaces, name):
			return fmt.Sprintf("its subnet %v is on interface %s, which the gateway could not open yet", q, name), ""
		case p.IsValid():
			return fmt.Sprintf("its subnet %v is on interface %s, which the gateway does not serve", q, name), name
		}
		return fmt.Sprintf("its subnet %v is on interface %s, which the gateway does not serve; add %s to its interfaces", q, name, name), ""
	}
	if p.IsValid() {
		return fmt.Sprintf("no interface here holds its subnet %v (where the controller placed it)", p), ""
	}
	return "no served interface's subnet holds it", ""
}

// Paces of watchLinks: debounceLinks gathers a burst of link and address
// changes (an interface coming up with its addresses) into one look;
// resyncLinks looks without a change, in case a notification was lost
// (the netlink socket's buffer overran).
const (
	debounceLinks = 100 * time.Millisecond
	resyncLinks   = time.Minute
)

// openMissing opens the interfaces of set that are not open and exist now;
// the others wait for watchLinks, each logged once per state.
func (e *Engine) openMissing(set *config.Settled) {
	for _, name := range set.Interfaces {
		if e.open(name) {
			continue
		}
		var msg string
		if _, err := e.nl.LinkByName(name); err != nil {
			msg = "engine: interface does not exist (yet); serving it when it appears"
		} else if err := e.addInterface(name, set); err != nil {
			msg = "engine: cannot serve interface; trying again when it changes: " + err.Error()
		}
		if msg == "" {
			delete(e.pending, name)
		} else if e.pending[name] != msg {
			e.log.Warn(msg, "interface", name)
			e.pending[name] = msg
		}
	}
}

// addInterface opens name after New's own: its XDP program and a socket
// per queue on the queue loops' pools, handed to running loops while they
// are held (pauseLoops), so no loop sees a half-added port.
func (e *Engine) addInterface(name string, set *config.Settled) error {
	l, err := e.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("engine: interface %q: %w", name, err)
	}
	if need := frameNeed(l.Attrs().MTU); need > e.frameSize {
		return fmt.Errorf("engine: interface %s has MTU %d, beyond this run's %d-byte frames; restart the gateway to serve it", name, l.Attrs().MTU, e.frameSize)
	}
	var ifc *nic.Interface
	if err := e.inOwnNS(func() (err error) {
		ifc, err = e.openInterface(name, set)
		return err
	}); err != nil {
		return err
	}
	e.pauseLoops()
	for _, l := range e.loops {
		l.addPort(ifc)
	}
	e.ifcs = append(e.ifcs, ifc)
	e.resumeLoops()
	if !set.EgressIPsClaimed {
		e.sweep = append(e.sweep, name)
	}
	if ifc.Mode() == "afpacket" && !e.packet {
		e.packet = true
		if err := e.installDrops(true, set.VTEPs, set.Hosted); err != nil {
			e.log.Warn("engine: AF_PACKET mode needs kernel drops for the steered traffic", "interface", name, "err", err)
		}
	}
	e.log.Info("engine: serving another interface", "interface", name, "mode", ifc.Mode())
	return nil
}

// pauseLoops stops the running queue loops and waits until they returned;
// resumeLoops starts them again. Both with e.mu held.
func (e *Engine) pauseLoops() {
	if !e.started {
		return
	}
	for _, l := range e.loops {
		l.hold.Store(true)
	}
	e.loopWG.Wait()
}

func (e *Engine) resumeLoops() {
	if !e.started {
		return
	}
	for _, l := range e.loops {
		l.hold.Store(false)
		e.runLoop(l)
	}
}

// runLoop runs l on its own goroutine (locked to its OS thread by run).
func (e *Engine) runLoop(l *queueLoop) {
	e.loopWG.Add(1)
	go func() {
		defer e.loopWG.Done()
		l.run(&e.stop)
	}()
}

// watchLinks follows the namespace's links and addresses until the engine
// closes: a change opens the configured interfaces that appeared and
// moves the claims to where the interfaces' subnets now place them.
func (e *Engine) watchLinks() error {
	stop := make(chan struct{})
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	onErr := func(err error) { e.log.Debug("engine: interface watch", "err", err) }
	if err := netlink.LinkSubscribeWithOptions(links, stop, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(stop)
		return fmt.Errorf("engine: watch interfaces: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		close(stop)
		return fmt.Errorf("engine: watch interface addresses: %w", err)
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(stop)
		resync := time.NewTicker(resyncLinks)
		defer resync.Stop()
		var debounce <-chan time.Time
		for {
			select {
			case <-e.done:
				return
			case _, ok := <-links:
				if !ok {
					links = nil // the resync still looks
				}
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
				}
			case <-debounce:
				debounce = nil
				e.refresh(false)
				continue
			case <-resync.C:
				e.refresh(true)
				continue
			}
			if debounce == nil {
				debounce = time.After(debounceLinks)
			}
		}
	}()
	return nil
}

// refresh opens what appeared and re-places the claims, under e.mu, in
// the engine's namespace: the claimer's nftables fence works in the
// namespace of the thread that calls it. resync (the periodic look) also
// retries interfaces that failed to open.
func (e *Engine) refresh(resync bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.set == nil {
		return
	}
	err := e.inOwnNS(func() error {
		e.openMissing(e.set)
		if e.set.EgressIPsClaimed || e.claimer == nil {
			return nil
		}
		return e.claimAll(e.set, resync)
	})
	if err != nil {
		e.log.Warn("engine: claiming egress IPs after an interface change", "err", err)
	}
}

// inOwnNS runs fn on a thread in the engine's namespace: the calling one
// when it is there, as every thread of a gateway process is (it runs in
// the node's namespace); else (a test's engine in a namespace of its own,
// reloaded or watched from another thread) a thread switched into it, which
// needs CAP_SYS_ADMIN. openInterface resolves names and binds sockets in
// the namespace of the thread it runs on.
func (e *Engine) inOwnNS(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cur, err := netns.Get()
	if err == nil {
		same := cur.Equal(e.ns)
		cur.Close()
		if same {
			return fn()
		}
	}
	return nsenter.Do(e.ns, fn)
}
