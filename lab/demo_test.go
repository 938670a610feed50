package lab

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestDemo runs `egret demo --json` end to end (the built binary) and checks
// its records: every selected pod seen as one of its object's egress IPs
// through the node hosting it, the unselected pod as its node's IP, every
// probe answered, and failover within reachabilityTotalTimeoutSeconds + 1 s;
// on both underlays (--underlay ipv6: every pod IPv6 only, leaving with an
// IPv6 egress IP or its node's IPv6 address).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo; skipped with -short")
	}
	requireRoot(t)
	requireTools(t, "ip", "bridge", "nft", "ethtool", "sysctl")
	for _, u := range []struct{ underlay, kind string }{{UnderlayIPv4, "d"}, {UnderlayIPv6, "v"}} {
		t.Run(u.underlay, func(t *testing.T) { testDemo(t, u.underlay, testLabName(u.kind)) })
	}
}

func testDemo(t *testing.T, underlay, name string) {
	bin := egretBinary(t)
	t.Cleanup(func() { Down("", name) })

	start := time.Now()
	cmd := exec.Command(bin, "demo", "--json", "--name", name, "--underlay", underlay)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	took := time.Since(start)
	t.Logf("egret demo took %v; progress:\n%s", took.Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("egret demo --json: %v\nstdout:\n%s", err, stdout.String())
	}
	var res struct {
		Records []struct {
			Phase, Pod, Namespace, Node, EgressIPObject, Probe, Family, Seen, Gateway string
			OK, Steered, AsExpected                                                   bool
			Expected                                                                  []string
		} `json:"records"`
		FailoverSeconds                 float64 `json:"failover_seconds"`
		ReachabilityTotalTimeoutSeconds int     `json:"reachabilityTotalTimeoutSeconds"`
		FailedGateway                   string  `json:"failedGateway"`
		Underlay                        string  `json:"underlay"`
		AssignmentBefore                []AssignmentStatus
		AssignmentAfter                 []AssignmentStatus
		Destinations                    []DemoDestination
		LongLived                       *struct {
			Pod, SeenBefore, SeenAfter, Gateway, Error string
			Survived                                   bool
			Seconds                                    float64
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("demo output is not JSON: %v\n%s", err, stdout.String())
	}
	if res.Underlay != underlay {
		t.Errorf("the demo reports underlay %q, want %q", res.Underlay, underlay)
	}
	v6only := underlay == UnderlayIPv6
	nodeIP := map[string]string{"w1": "192.0.2.11", "w2": "192.0.2.12", "w1/ipv6": "2001:db8:2::11", "w2/ipv6": "2001:db8:2::12"}
	wantObj := map[string]string{"w1-p1": "blue", "w2-p1": "blue", "w1-p2": "green", "w1-p3": "dual", "w2-p2": "", "w2-p3": "partner-a"}
	if v6only {
		wantObj["w1-p3"] = ""
	}
	checkDemoDestinations(t, res.Destinations, v6only)
	count := map[string]int{}
	v6 := map[string]int{}
	for _, r := range res.Records {
		count[r.Phase]++
		if r.Family == "ipv6" {
			v6[r.Phase+" "+r.Pod]++
			if ip, err := netip.ParseAddr(r.Seen); r.OK && (err != nil || !ip.Is6()) {
				t.Errorf("%s %s %s: an IPv6 probe seen as %q", r.Phase, r.Pod, r.Probe, r.Seen)
			}
		} else if r.Family != "ipv4" || v6only {
			t.Errorf("%s %s %s: family %q", r.Phase, r.Pod, r.Probe, r.Family)
		}
		if !r.OK {
			t.Errorf("%s %s %s: failed", r.Phase, r.Pod, r.Probe)
			continue
		}
		if r.EgressIPObject != wantObj[r.Pod] || r.Steered != (wantObj[r.Pod] != "") {
			t.Errorf("%s: object %q steered=%v, want %q", r.Pod, r.EgressIPObject, r.Steered, wantObj[r.Pod])
		}
		assign := res.AssignmentBefore
		if r.Phase == "after" {
			assign = res.AssignmentAfter
		}
		if !r.Steered {
			key := r.Node
			if r.Family == "ipv6" {
				key += "/ipv6"
			}
			if r.Seen != nodeIP[key] || r.Gateway != "" {
				t.Errorf("%s %s %s (unselected): server saw %s via %q, want its node IP %s", r.Phase, r.Pod, r.Probe, r.Seen, r.Gateway, nodeIP[key])
			}
			continue
		}
		i := slices.IndexFunc(assign, func(a AssignmentStatus) bool { return a.IP.String() == r.Seen })
		if i < 0 || assign[i].EgressIP != r.EgressIPObject || assign[i].Node != r.Gateway || !r.AsExpected {
			t.Errorf("%s %s %s: server saw %s via %s; not an egress IP of %s on that node (%v)", r.Phase, r.Pod, r.Probe, r.Seen, r.Gateway, r.EgressIPObject, assign)
		}
		if r.Phase == "after" && r.Gateway == res.FailedGateway {
			t.Errorf("after the failover %s still left through the killed gateway %s", r.Pod, r.Gateway)
		}
	}
	// Six pods over IPv4, the two dual-stack ones (w1-p3, w2-p2) also over
	// IPv6; in the IPv6-only lab five pods over IPv6.
	want, want6 := 6*len(ProbeKinds)+2*len(ProbeKinds6), len(ProbeKinds6)
	if v6only {
		want, want6 = 5*len(ProbeKinds), len(ProbeKinds)
	}
	if count["before"] != want || count["after"] != want {
		t.Errorf("records per phase %v, want %d each", count, want)
	}
	for _, k := range []string{"before w1-p3", "before w2-p2", "after w1-p3", "after w2-p2"} {
		if v6[k] != want6 {
			t.Errorf("%s: %d IPv6 probes, want %d", k, v6[k], want6)
		}
	}
	limit := float64(res.ReachabilityTotalTimeoutSeconds) + 1
	if res.FailoverSeconds <= 0 || res.FailoverSeconds > limit {
		t.Errorf("failover_seconds %.3f, want within (0, %.0f]", res.FailoverSeconds, limit)
	}
	t.Logf("failover of %s: %.3f s", res.FailedGateway, res.FailoverSeconds)
	// The keep-alive connection through the killed gateway went on: its
	// first answer after the kill came on the same connection, from the
	// same egress IP and port.
	switch ll := res.LongLived; {
	case ll == nil:
		t.Errorf("the demo reports no longLived connection")
	case !ll.Survived || ll.Error != "" || ll.SeenAfter != ll.SeenBefore || ll.Seconds <= 0:
		t.Errorf("the long-lived connection from %s (seen as %s) did not survive the kill: seen after as %q, %.3f s, %s", ll.Pod, ll.SeenBefore, ll.SeenAfter, ll.Seconds, ll.Error)
	case ll.Gateway != res.FailedGateway || !slices.ContainsFunc(res.AssignmentBefore, func(a AssignmentStatus) bool {
		ap, err := netip.ParseAddrPort(ll.SeenBefore)
		return err == nil && a.IP == ap.Addr() && a.Node == res.FailedGateway
	}):
		t.Errorf("the long-lived connection was seen as %s, not an egress IP of the killed gateway %s (%v)", ll.SeenBefore, res.FailedGateway, res.AssignmentBefore)
	default:
		t.Logf("long-lived connection from %s (%s) answered %.3f s after the kill", ll.Pod, ll.SeenBefore, ll.Seconds)
	}
	if left := Namespaces(name); len(left) > 0 {
		t.Errorf("the demo left namespaces behind without --keep: %v", left)
	}
}

// checkDemoDestinations checks the demo's per-destination probes: w2-p3
// (deploy/examples/lab/partner.yaml) seen as partner-a's 192.0.2.105 by the
// first server, as partner-b's 192.0.2.106 by the second, and as its node
// w2 (192.0.2.12) by the excluded address; none in the IPv6-only lab,
// which has no such objects.
func checkDemoDestinations(t *testing.T, recs []DemoDestination, v6only bool) {
	t.Helper()
	if v6only {
		if len(recs) != 0 {
			t.Errorf("the IPv6-only demo probed destinations: %+v", recs)
		}
		return
	}
	want := map[string]string{"198.51.100.10": "192.0.2.105", "203.0.113.10": "192.0.2.106", "203.0.113.11": "192.0.2.12"}
	if len(recs) != len(want) {
		t.Errorf("%d destination probes, want %d: %+v", len(recs), len(want), recs)
	}
	for _, r := range recs {
		if r.Pod != "w2-p3" || !r.OK || r.Seen != want[r.Destination] || !r.AsExpected || r.Excluded != (r.Destination == "203.0.113.11") {
			t.Errorf("%s to %s (%s): seen as %q (ok %v, as expected %v, excluded %v, %s), want %s",
				r.Pod, r.Destination, r.Server, r.Seen, r.OK, r.AsExpected, r.Excluded, r.Error, want[r.Destination])
		}
	}
}
