package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// deniedEvent is the part of an Event checkDeniedEvent reads.
type deniedEvent struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// checkDeniedEvent (issue 28 item 6): a client pod of ns opens TCP
// connections to dst, a destination the gateways deny (an address of the
// nodes' networks: a node's InternalIP or host-cidrs subnet), each refused
// (the SYN is dropped), and gets exactly one EgressDestinationDenied Event
// naming dst and allowedDestinations, however many it makes. also is a
// second denied destination, tried after them: once its Event is there,
// the gateway has handled every drop towards dst.
//
// ns must be selected by an EgressIP with a single egress IP, so that every
// connection of the pod goes through one gateway (each gateway tells a pod
// on its own), and dst and also must be steered into the tunnel: not in
// steer's clusterCIDRs, serviceCIDRs or nodeCIDRs (hack/cluster's overlay
// lists the nodes' network in nodeCIDRs, so that network never reaches a
// gateway there; deploy/'s default lists none).
func (e *env) checkDeniedEvent(ns testNS, dst, also string) {
	e.t.Helper()
	p := e.pods(ns.name)[0]
	events := func(to string) []deniedEvent {
		out := e.kubectl("-n", ns.name, "get", "events", "-o", "json",
			"--field-selector", "involvedObject.kind=Pod,involvedObject.name="+p.name+",reason=EgressDestinationDenied")
		var l struct {
			Items []deniedEvent `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			e.t.Fatalf("events of %s/%s: %v\n%s", ns.name, p.name, err, out)
		}
		var got []deniedEvent
		for _, ev := range l.Items {
			if strings.Contains(ev.Message, " "+to+" port ") {
				got = append(got, ev)
			}
		}
		return got
	}
	dial := func(to string, port int) {
		addr := net.JoinHostPort(to, fmt.Sprint(port))
		if out, err := e.exec(ns.name, p.name, "/bin/probe", "dial", addr); err == nil || !strings.Contains(out, "timeout") {
			e.t.Errorf("%s/%s on %s: TCP to %s: %q (err %v), want it refused by the gateway (a timeout)", ns.name, p.name, p.node, addr, out, err)
		}
	}
	for i := range 3 {
		dial(dst, 5432+i)
	}
	nstest.Until(e.t, "an EgressDestinationDenied Event for "+dst, 60*time.Second, func() (bool, string) {
		n := len(events(dst))
		return n > 0, fmt.Sprintf("%d Events", n)
	})
	for i := range 3 {
		dial(dst, 5432+i)
	}
	nstest.Until(e.t, "an EgressDestinationDenied Event for "+also, 60*time.Second, func() (bool, string) {
		dial(also, 5432)
		n := len(events(also))
		return n > 0, fmt.Sprintf("%d Events", n)
	})
	got := events(dst)
	if len(got) != 1 || got[0].Count != 1 {
		e.t.Fatalf("%s/%s: %d EgressDestinationDenied Events for %s (%+v), want one with count 1 for its 6 connections", ns.name, p.name, len(got), dst, got)
	}
	if ev := got[0]; ev.Type != "Warning" || !strings.Contains(ev.Message, "allowedDestinations") {
		e.t.Errorf("%s/%s: Event %s %q, want a Warning naming allowedDestinations", ns.name, p.name, ev.Type, ev.Message)
	}
	e.t.Logf("%s/%s: one EgressDestinationDenied Event for %s: %s", ns.name, p.name, dst, got[0].Message)
}
