package lab

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/plan"
	"github.com/egret-gw/egret/internal/nstest"
	"sigs.k8s.io/yaml"
)

// writtenObjects writes s's managed-mode objects into a temporary
// directory and returns it with the content of its nodes.yaml.
func writtenObjects(t *testing.T, s *Spec) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := writeObjects(s, dir, true, false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/nodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

// checkSelection checks that the objects in dir select each pod of s as
// wantPolicy says, towards the first server (the egress plan decides).
func checkSelection(t *testing.T, s *Spec, dir string) {
	t.Helper()
	v, err := objectsView(dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := plan.Build(v, plan.Options{})
	want := wantPolicy(s)
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			if got, _ := ownerOf(pl, p, s.Server.IP); got != want[p.Name] {
				t.Errorf("pod %s is selected by %q towards %v, want %q", p.Name, got, s.Server.IP, want[p.Name])
			}
		}
	}
}

// TestObjects checks the manifest directory managed mode writes: the
// Node, Namespace and Pod objects a cluster would hold, and the EgressIP
// manifests of deploy/examples/lab selecting the pods the spec says.
func TestObjects(t *testing.T) {
	s, err := DefaultSpec("egl")
	if err != nil {
		t.Fatal(err)
	}
	dir, b := writtenObjects(t, s)
	for _, want := range []string{"name: g1", "k8s.ovn.org/egress-assignable: \"\"", `k8s.ovn.org/node-primary-ifaddr: '{"ipv4":"192.0.2.21/24","ipv6":"2001:db8:2::21/64"}'`,
		"egret.io/vtep: 192.0.2.23", "type: InternalIP", "address: 192.0.2.12", "type: Ready"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nodes.yaml lacks %q:\n%s", want, b)
		}
	}
	if n := strings.Count(string(b), "egress-assignable"); n != 3 {
		t.Errorf("%d assignable nodes, want g1-g3 only", n)
	}
	eips, err := EgressIPs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(eips) != 5 || eips[0].Name != "blue" || len(eips[0].Spec.EgressIPs) != 2 || eips[1].Name != "dual" || eips[2].Name != "green" ||
		eips[3].Name != "partner-a" || eips[4].Name != "partner-b" {
		t.Fatalf("EgressIPs %+v", eips)
	}
	if d := eips[1].Spec.EgressIPs; len(d) != 2 || d[0] != "192.0.2.104" || d[1] != "2001:db8:2::104" {
		t.Errorf("dual-stack EgressIP has %v, want an IPv4 and an IPv6 egress IP", d)
	}
	pb, err := os.ReadFile(dir + "/pods.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pb), "ip: 2001:db8:18:1::4") {
		t.Errorf("pods.yaml lacks w1-p3's IPv6 podIP:\n%s", pb)
	}
	// Without DualStack the dual-stack object is not applied.
	dir4 := t.TempDir()
	if err := writeObjects(s, dir4, false, false); err != nil {
		t.Fatal(err)
	}
	if e4, err := EgressIPs(dir4); err != nil || len(e4) != 4 {
		t.Errorf("IPv4-only objects: %d EgressIPs (%v), want blue, green, partner-a and partner-b", len(e4), err)
	}
	checkSelection(t, s, dir)
	// A status file the controller writes is read back.
	eips[2].Status.Items = nil
	st := eips[2]
	st.Status.Items = append(st.Status.Items, egressv1.EgressIPStatusItem{Node: "g2", EgressIP: "192.0.2.102"})
	y, _ := yaml.Marshal(st)
	os.MkdirAll(dir+"/status", 0o755)
	if err := os.WriteFile(dir+"/status/green.yaml", y, 0o644); err != nil {
		t.Fatal(err)
	}
	if eips, _ = EgressIPs(dir); len(eips[2].Status.Items) != 1 || eips[2].Status.Items[0].Node != "g2" || len(eips[0].Status.Items) != 0 {
		t.Errorf("status not read back: %+v", eips)
	}
	if fullyAssigned(eips) {
		t.Error("blue has no status yet, but fullyAssigned is true")
	}
}

// TestManaged runs the lab with the real control plane: the controller's
// assignment is valid and traffic follows it, then a gateway is killed and
// its egress IPs move within reachabilityTotalTimeoutSeconds + 1 s, new
// connections use the new node, and the returned node gets IPs again
// after the hold-down.
//
// It runs on both lab variants: ipv4 (dual-stack nodes, IPv4 VTEPs, with
// the dual-stack EgressIP's checks) and ipv6 (IPv6-only nodes and pods,
// VXLAN over IPv6, with unsolicited inbound and PMTU over IPv6 on the
// primary family).
func TestManaged(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lab test; skipped with -short")
	}
	requireRoot(t)
	for _, u := range []struct{ underlay, kind string }{{UnderlayIPv4, "m"}, {UnderlayIPv6, "6"}} {
		t.Run(u.underlay, func(t *testing.T) { testManaged(t, upLabUnderlay(t, testLabName(u.kind), ModeManaged, u.underlay)) })
	}
}

// wantPolicy is the EgressIP each pod of the managed lab is selected by
// towards the first server (deploy/examples/lab, or its ipv6 folder, which
// has no dual-stack or per-destination objects): w2-p3 leaves as
// partner-a there.
func wantPolicy(s *Spec) map[string]string {
	if s.IPv6Only() {
		return map[string]string{"w1-p1": "blue", "w2-p1": "blue", "w1-p2": "green", "w1-p3": "", "w2-p2": ""}
	}
	return map[string]string{"w1-p1": "blue", "w2-p1": "blue", "w1-p2": "green", "w1-p3": "dual", "w2-p2": "", "w2-p3": "partner-a"}
}

func testManaged(t *testing.T, l *Lab) {
	m := l.Impl.(Managed)
	limit := time.Duration(m.reach())*time.Second + time.Second

	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) > 0 {
		t.Fatalf("problems: %v", st.Problems)
	}
	checkAssignment(t, st)
	checkStandbys(t, st)
	for _, p := range st.Pods {
		if want := wantPolicy(l.Spec)[p.Name]; p.Policy != want {
			t.Errorf("pod %s: selected by %q, want %q", p.Name, p.Policy, want)
		}
	}
	checkClaims(t, l, st, "")
	t.Run("EgretStatus", func(t *testing.T) { checkEgretStatus(t, l) })
	t.Run("EgretTrace", func(t *testing.T) { checkEgretTrace(t, l, st) })
	t.Run("Sources", func(t *testing.T) { checkSources(t, l, st) })
	if !l.Spec.IPv6Only() {
		t.Run("ByDestination", func(t *testing.T) { testByDestination(t, l, st) })
		t.Run("DNSName", func(t *testing.T) { testDNSName(t, l) })
	}
	t.Run("Spread", func(t *testing.T) {
		// Per-connection balancing: new connections of a blue pod use both
		// of blue's egress IPs.
		p := st.Pod("w1-p1")
		seen := map[netip.Addr]int{}
		for i := 0; i < 24; i++ {
			a, err := l.Spec.ProbeSource(p.Namespace, ProbeHTTP, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			seen[a]++
		}
		for _, e := range p.EgressIPs {
			if seen[e] == 0 {
				t.Errorf("24 connections from w1-p1 never used %v: %v", e, seen)
			}
		}
	})

	if l.Spec.IPv6Only() {
		t.Run("IPv6Only", func(t *testing.T) { testIPv6Only(t, l, st) })
	} else {
		t.Run("DualStack", func(t *testing.T) { testDualStack(t, l) })
	}
	if st, err = l.Status(); err != nil {
		t.Fatal(err)
	}

	gw := killTarget(st)
	// A connection through gw whose port was not preserved: the flow sync
	// to the standby of its egress IP must carry it (issue 15).
	synced := startSynced(t, l, st, gw)
	// 50 long-lived connections from each pod of blue (one per worker)
	// through gw's egress IP of blue, 10 of them on a port the server sees
	// changed, and 20 through blue's other IP, on another gateway (the
	// workers' multipath route picks one per connection): through the kill,
	// the first must all go on, carried by the standby's synced flows, and
	// the others must not notice.
	blue := bluePods(st)
	lived := startLongLived(t, l, blue, synced.ip, 50, 20, 10)
	// A UDP conversation through the gateway that will be killed: new
	// sockets until the multipath hash sends one there.
	var talk *udpTalk
	for try := 0; talk == nil; try++ {
		u := startUDPTalk(t, l, blue[try%len(blue)])
		if slices.ContainsFunc(st.Assignment, func(a AssignmentStatus) bool { return a.IP == u.srcs[0].Addr() && a.Node == gw }) {
			talk = u
			continue
		}
		u.end()
		if try == 31 {
			t.Fatalf("32 UDP conversations of blue's pods, none through %s", gw)
		}
	}
	// Ten exchanges on each before the kill.
	n := talk.answers.Load()
	nstest.Eventually(t, "ten UDP exchanges before the kill", 10*time.Second, func() bool { return talk.answers.Load() >= n+10 })
	for range 10 {
		lived.answeredSince(time.Now(), 5*time.Second)
	}
	// The standby holds every one of them: what the kill tests is the
	// takeover, not a race with the sync.
	waitHeld(t, l, synced.standby, synced.ip, lived)
	// The server saw the synced connection from synced.seen: the NAT log
	// names the pod behind it (blue[1] opened it, startSynced).
	t.Run("NATLog", func(t *testing.T) { checkNATLog(t, l, synced, blue[1].Name, gw) })
	t.Run("EgretStatusInStep", func(t *testing.T) {
		// egret status compares the two gateways' flows: the standby
		// holds all of them (waitHeld), so it is in step.
		ip := egretStatus(t, l).ip(synced.ip)
		if ip == nil || ip.Node == nil || *ip.Node != gw || ip.Standby == nil || *ip.Standby != synced.standby ||
			ip.StandbyState != "in-step" || strings.Contains(ip.StandbyDetail, "all 0 flows") {
			t.Fatalf("egret status of %v (on %s, standby %s, which holds its flows): %+v", synced.ip, gw, synced.standby, ip)
		}
		t.Logf("egret status: %v on %s, standby %s %s: %s", synced.ip, gw, synced.standby, ip.StandbyState, ip.StandbyDetail)
	})
	nd := watchND(t, l, gw)
	res, err := l.Failover(gw, 10*time.Second)
	if err != nil {
		t.Fatalf("failover of %s: %v", gw, err)
	}
	failedOver := time.Now()
	t.Run("MovedToTheStandby", func(t *testing.T) {
		// Each IP of the killed gateway went to the standby recorded for
		// it before the kill: the node that holds its flows.
		for _, m := range res.Moved {
			i := slices.IndexFunc(st.Assignment, func(a AssignmentStatus) bool { return a.EgressIP == m.EgressIP && a.IP == m.IP })
			if i < 0 || st.Assignment[i].Standby == "" || m.Node != st.Assignment[i].Standby {
				t.Errorf("%s %v moved to %s, its recorded standby was %v", m.EgressIP, m.IP, m.Node, st.Assignment)
			}
		}
	})
	t.Run("ConnectionsContinue", func(t *testing.T) {
		lived.checkContinued(t, synced.ip, "the kill -9 of "+gw, res.Killed)
		if t.Failed() {
			logCounters(t, l, gw)
		}
	})
	t.Run("SurvivorsUninterrupted", func(t *testing.T) { lived.checkUndisturbed(t, synced.ip, gw) })
	t.Run("UnpreservedPortSynced", func(t *testing.T) { synced.check(t) })
	// The same question after the kill -9 is answered by the standby's
	// record of the flow it adopted.
	t.Run("NATLogAfterFailover", func(t *testing.T) { checkNATLog(t, l, synced, blue[1].Name, synced.standby) })
	t.Run("UDPKeepsItsPort", func(t *testing.T) { talk.checkKeptPort(t, failedOver) })
	t.Run("NeighbourDiscovery", func(t *testing.T) { nd.check(t, l, res.Moved) })
	t.Logf("failover of %s (%s): status after %.3f s, first request from %s with the moved IP after %.3f s; %d requests, %d failed (limit %v)",
		gw, movedString(res.Moved), res.StatusSeconds, res.Pod, res.TrafficSeconds, res.Attempts, res.Failed, limit)
	if res.StatusSeconds > limit.Seconds() || res.TrafficSeconds > limit.Seconds() {
		t.Errorf("failover took %.3f s (status) / %.3f s (traffic); the limit is %v", res.StatusSeconds, res.TrafficSeconds, limit)
	}
	st, _ = l.Status()
	checkAssignment(t, st)
	for _, a := range st.Assignment {
		if a.Node == gw {
			t.Errorf("%v is still on the killed gateway %s", a.IP, gw)
		}
	}
	t.Run("NewConnectionsUseTheNewNode", func(t *testing.T) { checkSources(t, l, st) })
	t.Run("EgretStatusAfterFailover", func(t *testing.T) { checkEgretStatus(t, l) })

	// The node returns: after the hold-down it takes IPs again. Assigned IPs
	// never move back (minimal churn), so another gateway fails and its IPs
	// must land on the returned one.
	if err := l.StartGateway(gw); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	var other string
	for _, a := range st.Assignment {
		if a.Node != gw && (other == "" || a.Node < other) {
			other = a.Node
		}
	}
	// The returned agent must not hold on to what it had claimed before it
	// was killed: those IPs live on other nodes now.
	checkClaims(t, l, st, "")
	// sleep: the controller process's hold-down runs out on its clock; that nothing moves after it has no event
	time.Sleep(time.Until(back.Add(m.holdDown() + 500*time.Millisecond)))
	// (Standbys may change: the returned node now stands by for the IPs
	// that had none.)
	if st2, _ := l.Status(); !slices.EqualFunc(st.Assignment, st2.Assignment, func(a, b AssignmentStatus) bool {
		return a.EgressIP == b.EgressIP && a.IP == b.IP && a.Node == b.Node
	}) {
		t.Errorf("the assignment changed when %s returned (minimal churn): %v → %v", gw, st.Assignment, st2.Assignment)
	}
	res2, err := l.Failover(other, 10*time.Second)
	if err != nil {
		t.Fatalf("second failover (%s): %v", other, err)
	}
	t.Logf("second failover of %s: %s after %.3f s", other, movedString(res2.Moved), res2.Seconds())
	if !slices.ContainsFunc(res2.Moved, func(a AssignmentStatus) bool { return a.Node == gw }) {
		t.Errorf("the returned gateway %s got none of %s's IPs: %s", gw, other, movedString(res2.Moved))
	}
	st, _ = l.Status()
	checkAssignment(t, st)
	checkClaims(t, l, st, other)
	t.Run("SourcesAfterReturn", func(t *testing.T) { checkSources(t, l, st) })

	// The rest of issue 15's continuity tests need every gateway. They run
	// on the IPv4 lab only: the flow sync and the data plane are the same
	// code over IPv6, whose failover the kill above covers.
	if l.Spec.IPv6Only() {
		return
	}
	if err := l.StartGateway(other); err != nil {
		t.Fatal(err)
	}
	t.Run("Continuity", func(t *testing.T) { testContinuity(t, l) })
}

// bluePods are the pods blue selects, one on each worker.
func bluePods(st *Status) []PodStatus {
	var blue []PodStatus
	for _, p := range st.Pods {
		if p.Policy == "blue" {
			blue = append(blue, p)
		}
	}
	return blue
}

// killTarget picks the gateway the failover kills: one of blue's two
// gateways when its death makes the worker's multipath route change in a
// way that would move the other one's share were the next hops simply
// listed in order (gateway names sort as their VTEPs do); blue's IP then
// goes to the third gateway, the only one without an IP of blue. Without
// such a choice, green's gateway.
func killTarget(st *Status) string {
	var blue []string
	green := ""
	for _, a := range st.Assignment {
		switch a.EgressIP {
		case "blue":
			blue = append(blue, a.Node)
		case "green":
			green = a.Node
		}
	}
	slices.Sort(blue)
	gws := map[string]bool{}
	for _, a := range st.Assignment {
		if strings.HasPrefix(a.Node, "g") {
			gws[a.Node] = true
		}
	}
	if len(blue) != 2 || len(gws) != 3 {
		return green
	}
	var third string
	for g := range gws {
		if !slices.Contains(blue, g) {
			third = g
		}
	}
	switch {
	case third > blue[1]: // [a b] → [b third]: b's share would move
		return blue[0]
	case third < blue[0]: // [a b] → [third a]: a's share would move
		return blue[1]
	}
	return green
}

// checkAssignment checks the spec's rules on the controller's status: every
// IP assigned once, to a live gateway, no node with two IPs of one object.
func checkAssignment(t *testing.T, st *Status) {
	t.Helper()
	perNode := map[string]bool{}
	for _, a := range st.Assignment {
		if a.Node == "" {
			t.Errorf("%s %v is unassigned", a.EgressIP, a.IP)
			continue
		}
		if !strings.HasPrefix(a.Node, "g") {
			t.Errorf("%v assigned to %s, which is not egress-assignable", a.IP, a.Node)
		}
		if perNode[a.EgressIP+"/"+a.Node] {
			t.Errorf("%s hosts two IPs of %s", a.Node, a.EgressIP)
		}
		perNode[a.EgressIP+"/"+a.Node] = true
	}
}

// checkStandbys checks the controller's egret.io/standby annotations: with
// three gateways every assigned IP has a standby, another gateway hosting
// no IP of the same object (so a takeover keeps one IP of an object per node).
func checkStandbys(t *testing.T, st *Status) {
	t.Helper()
	hosts := map[string]bool{} // "object/node"
	for _, a := range st.Assignment {
		hosts[a.EgressIP+"/"+a.Node] = true
	}
	for _, a := range st.Assignment {
		switch {
		case a.Node == "":
		case a.Standby == "":
			t.Errorf("%s %v on %s has no standby", a.EgressIP, a.IP, a.Node)
		case !strings.HasPrefix(a.Standby, "g") || a.Standby == a.Node:
			t.Errorf("%s %v on %s has standby %s, which is not another gateway", a.EgressIP, a.IP, a.Node, a.Standby)
		case hosts[a.EgressIP+"/"+a.Standby]:
			t.Errorf("%s %v's standby %s hosts another IP of %s", a.EgressIP, a.IP, a.Standby, a.EgressIP)
		}
	}
}

// checkClaims checks that each gateway's eth0 holds exactly the egress IPs
// the controller assigned to it (skip: a gateway that is down).
func checkClaims(t *testing.T, l *Lab, st *Status, skip string) {
	t.Helper()
	for _, g := range l.Spec.Gateways {
		if g.Name == skip {
			continue
		}
		out, err := run("ip", "-n", l.Spec.NS(g.Name), "-o", "addr", "show", "dev", "eth0")
		if err != nil {
			t.Fatal(err)
		}
		var have, want []string
		for _, f := range strings.Fields(out) {
			// Egress IPs are claimed as /32 and /128 (node addresses are /24, /64).
			if a, ok := strings.CutSuffix(f, "/32"); ok {
				have = append(have, a)
			} else if a, ok := strings.CutSuffix(f, "/128"); ok {
				have = append(have, a)
			}
		}
		for _, a := range st.Assignment {
			if a.Node == g.Name {
				want = append(want, a.IP.String())
			}
		}
		slices.Sort(have)
		slices.Sort(want)
		if !slices.Equal(have, want) {
			t.Errorf("%s's eth0 holds egress IPs %v, the controller assigned it %v (an IP on two nodes answers ARP / NDP on both)", g.Name, have, want)
		}
	}
}

// checkSources sends every probe kind from every pod and checks the server
// saw one of the pod's expected sources (an assigned egress IP of its
// object, or its node's IP when none selects it).
func checkSources(t *testing.T, l *Lab, st *Status) {
	t.Helper()
	for _, p := range st.Pods {
		kinds := ProbeKinds
		if len(p.ExpectedSources6) > 0 {
			kinds = append(append([]string{}, ProbeKinds...), ProbeKinds6...)
		}
		for _, kind := range kinds {
			var got netip.Addr
			var err error
			for try := 0; try < 3; try++ {
				if got, err = l.Spec.ProbeSource(p.Namespace, kind, 2*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				t.Errorf("%s %s: %v", p.Name, kind, err)
			} else if want := p.ExpectedSources; strings.HasSuffix(kind, "6") && !slices.Contains(p.ExpectedSources6, got) {
				t.Errorf("%s %s: server saw %v, want one of %v", p.Name, kind, got, p.ExpectedSources6)
			} else if !strings.HasSuffix(kind, "6") && !slices.Contains(want, got) {
				t.Errorf("%s %s: server saw %v, want one of %v", p.Name, kind, got, want)
			}
		}
	}
}

// statusOut is `egret status -o json` (docs/status.md).
type statusOut struct {
	EgressIPs []struct {
		Name string     `json:"name"`
		IPs  []statusIP `json:"ips"`
	} `json:"egressIPs"`
	Pods []statusPod `json:"pods"`
}

type statusPod struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Node      string         `json:"node"`
	EgressIP  *string        `json:"egressIP"`
	Sources   []statusSource `json:"sources"`
	// Destinations: the networks objects with a trafficSelector decide.
	Destinations []statusDest `json:"destinations"`
	State        string       `json:"state"`
	Problems     []string     `json:"problems"`
}

type statusSource struct {
	Family   string     `json:"family"`
	IP       netip.Addr `json:"ip"`
	Gateways []string   `json:"gateways"`
	Object   string     `json:"object"`
}

type statusDest struct {
	Network  netip.Prefix `json:"network"`
	EgressIP string       `json:"egressIP"`
	Excluded bool         `json:"excluded"`
}

type statusIP struct {
	IP            netip.Addr `json:"ip"`
	Node          *string    `json:"node"`
	Standby       *string    `json:"standby"`
	StandbyState  string     `json:"standbyState"`
	StandbyDetail string     `json:"standbyDetail"`
}

// ip is egress IP a's entry, nil when no object has it.
func (s *statusOut) ip(a netip.Addr) *statusIP {
	for i := range s.EgressIPs {
		for j := range s.EgressIPs[i].IPs {
			if s.EgressIPs[i].IPs[j].IP == a {
				return &s.EgressIPs[i].IPs[j]
			}
		}
	}
	return nil
}

// egretStatus runs the operator's `egret status --lab NAME -o json` on l.
func egretStatus(t *testing.T, l *Lab) *statusOut {
	t.Helper()
	var st statusOut
	runJSON(t, &st, l.Binary, "status", "--lab", l.Spec.Name, "-o", "json")
	return &st
}

// runJSON runs a command and decodes its output as JSON into v.
func runJSON(t *testing.T, v any, name string, args ...string) {
	t.Helper()
	out, err := run(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// checkEgretStatus checks that `egret status --lab -o json` agrees with
// `egret lab status --json` on every pod: its owner, the egress IPs it
// leaves as (none when unselected: it leaves as its node) and the gateway
// of each; and on every egress IP's node and standby.
func checkEgretStatus(t *testing.T, l *Lab) {
	t.Helper()
	var ls Status
	runJSON(t, &ls, l.Binary, "lab", "status", "--name", l.Spec.Name, "--json")
	st := egretStatus(t, l)
	if len(st.Pods) != len(ls.Pods) {
		t.Errorf("egret status lists %d pods, egret lab status %d", len(st.Pods), len(ls.Pods))
	}
	for _, lp := range ls.Pods {
		i := slices.IndexFunc(st.Pods, func(p statusPod) bool {
			return p.Namespace == lp.KubeNamespace && p.Name == lp.Name
		})
		if i < 0 {
			t.Errorf("pod %s/%s is not in egret status", lp.KubeNamespace, lp.Name)
			continue
		}
		p := st.Pods[i]
		if lp.Destinations != nil {
			checkStatusByDestination(t, lp, p)
			continue
		}
		owner := ""
		if p.EgressIP != nil {
			owner = *p.EgressIP
		}
		var got, want []string
		for _, s := range p.Sources {
			got = append(got, fmt.Sprintf("%v on %v", s.IP, s.Gateways))
		}
		if lp.Policy != "" {
			for _, a := range append(slices.Clone(lp.ExpectedSources), lp.ExpectedSources6...) {
				want = append(want, fmt.Sprintf("%v on [%s]", a, lp.Gateways[slices.Index(lp.EgressIPs, a)]))
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		wantState := "egress"
		switch {
		case lp.Policy == "":
			wantState = "not-selected"
		case len(want) == 0:
			wantState = "no-node-can-host"
		}
		if owner != lp.Policy || p.Node != lp.Node || p.State != wantState || !slices.Equal(got, want) {
			t.Errorf("pod %s/%s: egret status says EgressIP %q on %s, %s, sources %v (problems %q); egret lab status says %q on %s, sources %v",
				lp.KubeNamespace, lp.Name, owner, p.Node, p.State, got, p.Problems, lp.Policy, lp.Node, want)
		}
	}
	for _, a := range ls.Assignment {
		ip := st.ip(a.IP)
		deref := func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		}
		if ip == nil || deref(ip.Node) != a.Node || deref(ip.Standby) != a.Standby {
			t.Errorf("%s %v: egret status says %+v, egret lab status node %q, standby %q", a.EgressIP, a.IP, ip, a.Node, a.Standby)
		}
	}
}

// traceOut is the part of `egret trace -o json` (docs/status.md) the lab
// checks.
type traceOut struct {
	Checks []struct {
		Name    string `json:"name"`
		Result  string `json:"result"`
		Decides bool   `json:"decides"`
	} `json:"checks"`
	Verdict string `json:"verdict"`
	SeenAs  string `json:"seenAs"`
	Reason  string `json:"reason"`
	Setting string `json:"setting"`
}

// checkEgretTrace runs the operator's `egret trace --lab NAME`: for a blue
// pod, a connection to the server leaves as the address the server sees
// from it, and one to the cloud metadata address is dropped by the named
// built-in deny-list entry, with the setting that opens it.
func checkEgretTrace(t *testing.T, l *Lab, st *Status) {
	p := st.Pod("w1-p1")
	pod := p.KubeNamespace + "/" + p.Name
	seen, err := l.Spec.ProbeSource(p.Namespace, ProbeHTTP, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var tr traceOut
	runJSON(t, &tr, l.Binary, "trace", "--lab", l.Spec.Name, pod, netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort).String(), "-o", "json")
	if tr.Verdict != "egress" || !strings.Contains(tr.SeenAs, seen.String()) {
		t.Errorf("egret trace %s to the server: %s as %q (%s); the server saw %v", pod, tr.Verdict, tr.SeenAs, tr.Reason, seen)
	}
	metadata, entry := "169.254.169.254:80", "169.254.0.0/16"
	if l.Spec.IPv6Only() {
		metadata, entry = "[fd00:ec2::254]:80", "fd00:ec2::/32"
	}
	tr = traceOut{}
	runJSON(t, &tr, l.Binary, "trace", "--lab", l.Spec.Name, pod, metadata, "-o", "json")
	last := tr.Checks[len(tr.Checks)-1]
	if tr.Verdict != "dropped" || last.Name != "deny-list" || !last.Decides || !strings.Contains(tr.Reason, "entry "+entry+" (built in") ||
		!strings.Contains(tr.Setting, "allowedDestinations: ["+entry+"]") {
		t.Errorf("egret trace %s %s: %+v; want it dropped by the deny-list's entry %s", pod, metadata, tr, entry)
	}
}

func movedString(ms []AssignmentStatus) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.IP.String()+"→"+m.Node)
	}
	return strings.Join(parts, ", ")
}

// TestManagedStatus reads a managed lab's run folder (no namespaces): the
// assignment comes from the status files, the selection from the manifests.
func TestManagedStatus(t *testing.T) {
	s, err := DefaultSpec("eltunit")
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{Spec: s, RunRoot: t.TempDir()}
	objs := ObjectsDir(l.RunDir())
	if err := writeObjects(s, objs, true, false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.RunDir()+"/state.json", []byte(`{"name":"eltunit","mode":"managed"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(objs+"/status", 0o755)
	writeStatus := func(name string, items ...egressv1.EgressIPStatusItem) {
		t.Helper()
		y, _ := yaml.Marshal(egressv1.EgressIP{Status: egressv1.EgressIPStatus{Items: items}})
		if err := os.WriteFile(objs+"/status/"+name+".yaml", y, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeStatus("blue", egressv1.EgressIPStatusItem{Node: "g3", EgressIP: "192.0.2.103"})
	writeStatus("partner-a", egressv1.EgressIPStatusItem{Node: "g1", EgressIP: "192.0.2.105"})
	writeStatus("partner-b", egressv1.EgressIPStatusItem{Node: "g2", EgressIP: "192.0.2.106"})
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Up || st.Mode != ModeManaged || st.Controller == nil || st.Controller.Running || len(st.Steer) != 2 {
		t.Fatalf("status %+v", st)
	}
	if !slices.Contains(st.Problems, "egret controller is not running") {
		t.Errorf("dead controller not reported: %v", st.Problems)
	}
	w1p1, w1p2, w2p2 := st.Pod("w1-p1"), st.Pod("w1-p2"), st.Pod("w2-p2")
	if w1p1.Policy != "blue" || w1p1.KubeNamespace != "shop" || len(w1p1.EgressIPs) != 1 || w1p1.EgressIPs[0].String() != "192.0.2.103" || w1p1.Gateway != "g3" {
		t.Errorf("w1-p1: %+v", w1p1)
	}
	if w1p2.Policy != "green" || w1p2.EgressIP != nil || len(w1p2.ExpectedSources) != 0 {
		t.Errorf("w1-p2 (green unassigned) must expect nothing (fail closed): %+v", w1p2)
	}
	if w2p2.Policy != "" || w2p2.ExpectedSource.String() != "192.0.2.12" {
		t.Errorf("w2-p2: %+v", w2p2)
	}
	// w2-p3 is selected by destination: partner-a's IP towards the first
	// server, partner-b's towards the second, its node's address towards
	// the excluded address; the first server's is also its ExpectedSources.
	w2p3 := st.Pod("w2-p3")
	wantDest := []DestinationStatus{
		{Destination: s.Server.IP, EgressIPObject: "partner-a", ExpectedSources: []netip.Addr{netip.MustParseAddr("192.0.2.105")}},
		{Destination: s.Server2.IP, EgressIPObject: "partner-b", ExpectedSources: []netip.Addr{netip.MustParseAddr("192.0.2.106")}},
		{Destination: s.Server2.Excluded, Excluded: true, ExpectedSources: []netip.Addr{s.Workers[1].IP}},
	}
	if w2p3.Policy != "partner-a" || !slices.Equal(w2p3.ExpectedSources, wantDest[0].ExpectedSources) || fmt.Sprint(w2p3.Destinations) != fmt.Sprint(wantDest) {
		t.Errorf("w2-p3: %+v\nwant destinations %+v", w2p3, wantDest)
	}
	if d := st.Pod("w1-p1").Destinations; d != nil {
		t.Errorf("w1-p1 is not selected by destination, but has destinations %+v", d)
	}
	if len(st.Servers) != 2 || st.Servers[0] != st.Server || st.Servers[1].IP != s.Server2.IP || st.Servers[1].Namespace != "eltunit-srv2" {
		t.Errorf("servers %+v", st.Servers)
	}
	if len(st.Assignment) != 7 || st.Assignment[0].Node != "" || st.Assignment[1].Node != "g3" {
		t.Errorf("assignment %+v", st.Assignment)
	}
	if g3 := st.Gateways[2]; len(g3.EgressIPs) != 1 || g3.Policies[0] != "blue" {
		t.Errorf("g3: %+v", g3)
	}
	// A corrupt status file is a problem, not a crash.
	if err := os.WriteFile(objs+"/status/green.yaml", []byte("status: [unclosed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err = l.Status(); err != nil || !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, "status of green") }) {
		t.Errorf("corrupt status file: err %v, problems %v", err, st.Problems)
	}
	var b strings.Builder
	st.WriteText(&b)
	if !strings.Contains(b.String(), "controller") {
		t.Errorf("text status:\n%s", b.String())
	}
}

// logCounters logs, for every gateway but skip, the counters that say what
// happened to connections it did not know: pick-ups, resets, flow sync.
func logCounters(t *testing.T, l *Lab, skip string) {
	t.Helper()
	for _, g := range l.Spec.Gateways {
		if g.Name == skip {
			continue
		}
		var parts []string
		for _, m := range []string{`egret_gateway_dropped_packets_total{reason="tcp_no_flow"}`, "egret_gateway_tcp_resets_sent_total",
			"egret_gateway_flows_picked_up_total", "egret_gateway_sync_backup_flows", "egret_gateway_sync_records_applied_total",
			"egret_gateway_sync_adopt_failures_total", "egret_gateway_sync_records_owned_total", "egret_gateway_sync_full_resyncs_total"} {
			parts = append(parts, fmt.Sprintf("%s %v", strings.TrimPrefix(m, "egret_gateway_"), gatewayMetric(t, l.Spec, g.Name, m)))
		}
		t.Logf("%s: %s", g.Name, strings.Join(parts, ", "))
	}
}

// checkStatusByDestination: egret status lists, for a pod selected by
// destination, a network of each object the lab's status names, and a
// source of that object for each destination it does not exclude.
func checkStatusByDestination(t *testing.T, lp PodStatus, p statusPod) {
	t.Helper()
	if p.State != "egress" {
		t.Errorf("pod %s/%s: egret status says %s (problems %q), want egress", lp.KubeNamespace, lp.Name, p.State, p.Problems)
	}
	for _, d := range lp.Destinations {
		covered := slices.ContainsFunc(p.Destinations, func(n statusDest) bool {
			return n.Network.Contains(d.Destination) && n.Excluded == d.Excluded && (d.Excluded || n.EgressIP == d.EgressIPObject)
		})
		if !covered {
			t.Errorf("pod %s/%s: egret status has no destination entry for %v (%s, excluded %v): %+v", lp.KubeNamespace, lp.Name, d.Destination, d.EgressIPObject, d.Excluded, p.Destinations)
		}
		if d.Excluded {
			continue
		}
		for _, want := range d.ExpectedSources {
			if !slices.ContainsFunc(p.Sources, func(s statusSource) bool {
				return s.IP == want && s.Object == d.EgressIPObject
			}) {
				t.Errorf("pod %s/%s: egret status has no source %v of %s: %+v", lp.KubeNamespace, lp.Name, want, d.EgressIPObject, p.Sources)
			}
		}
	}
}
