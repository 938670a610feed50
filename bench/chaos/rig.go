package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/lab"
)

// rig is what both runs (make chaos's faults, make soak's churn) watch the
// lab with: the outside servers and their packet recorder, the ARP watcher
// on the router, the status sampler's timeline and every pod's traffic.
type rig struct {
	l       *lab.Lab
	eips    []netip.Addr // the IPv4 egress IPs the ARP watcher asks for
	srvs    *servers
	rec     *recorder
	arp     *arpWatch
	tl      *timeline
	traffic []*podTraffic

	stopc chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// override, when set, adjusts what the status allowed before the
	// sample is recorded: the soak's deleted pod is no pod at all to the
	// controller, while the lab's status (built from the spec) still
	// lists it.
	override func(allowed map[string][]netip.Addr)
}

// startRig starts the servers, the recorders, the sampler and the traffic
// on a lab that is up.
func startRig(l *lab.Lab) (*rig, error) {
	spec := l.Spec
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	r := &rig{l: l, tl: &timeline{}, stopc: make(chan struct{})}
	byTCP, byUDP, byNS := map[uint16]string{}, map[uint16]string{}, map[string]string{}
	for i, p := range st.Pods {
		byTCP[uint16(tcpBase+i)], byUDP[uint16(udpBase+i)], byNS[p.Namespace] = p.Name, p.Name, p.Name
	}
	for _, a := range st.Assignment {
		if a.IP.Is4() {
			r.eips = append(r.eips, a.IP)
		}
	}
	srvNS := spec.NS(spec.Server.Name)
	if r.srvs, err = serve(srvNS, spec.Server.IP, len(st.Pods)); err != nil {
		return nil, err
	}
	if r.rec, err = newRecorder(srvNS, byTCP, byUDP, byNS); err != nil {
		r.srvs.close()
		return nil, err
	}
	if r.arp, err = newARPWatch(spec.NS(spec.Router.Name), "eth0", spec.Router.IP, r.eips); err != nil {
		r.srvs.close()
		unix.Close(r.rec.fd)
		return nil, err
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.rec.run(r.stopc) }()
	go func() { defer r.wg.Done(); r.arp.run(r.stopc, arpInterval) }()

	if err := r.sample(); err != nil {
		r.stop()
		return nil, err
	}
	every(r.stopc, &r.wg, 100*time.Millisecond, func() { r.sample() }) // a failed sample is retried at the next

	r.traffic = make([]*podTraffic, len(st.Pods))
	for i, p := range st.Pods {
		r.traffic[i] = &podTraffic{name: p.Name, ns: p.Namespace,
			tcp:  netip.AddrPortFrom(spec.Server.IP, uint16(tcpBase+i)).String(),
			udp:  netip.AddrPortFrom(spec.Server.IP, uint16(udpBase+i)).String(),
			ping: func() { spec.PingSource(p.Namespace, time.Second) }}
		r.traffic[i].run(r.stopc, &r.wg)
	}
	return r, nil
}

// sample records what the controller's status allows each pod now.
func (r *rig) sample() error {
	objs := lab.ObjectsDir(r.l.RunDir())
	present := func() bool { _, err := os.Stat(objs); return err == nil }
	if !present() {
		return errors.New("the objects are away")
	}
	st, err := r.l.Status()
	if err != nil || !present() {
		return fmt.Errorf("reading the status: %v", err)
	}
	// With the objects away (the API server stopped) the status reads
	// as no object at all: the last one read still stands.
	for _, p := range st.Problems {
		if strings.HasPrefix(p, "reading the EgressIP objects") {
			return errors.New(p)
		}
	}
	allowed := map[string][]netip.Addr{}
	for _, p := range st.Pods {
		allowed[p.Name] = slices.Clone(p.ExpectedSources)
	}
	r.mu.Lock()
	if r.override != nil {
		r.override(allowed)
	}
	r.mu.Unlock()
	r.tl.add(time.Now(), allowed)
	return nil
}

// setOverride installs (or, with nil, removes) the sampler's adjustment.
func (r *rig) setOverride(fn func(allowed map[string][]netip.Addr)) {
	r.mu.Lock()
	r.override = fn
	r.mu.Unlock()
}

// stop ends the traffic, the sampler and the recorders.
func (r *rig) stop() {
	close(r.stopc)
	r.wg.Wait()
	<-r.rec.done
	<-r.arp.done
	r.srvs.close()
}
