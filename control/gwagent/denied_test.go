package gwagent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/internal/nstest"
)

type recorded struct {
	ref            corev1.ObjectReference
	typ, why, what string
}

// TestDeniedEventsWindow: one Event per pod and destination per window,
// none for a pod the configuration does not name or another reason, and
// the pairs held stay within Remembered.
func TestDeniedEventsWindow(t *testing.T) {
	var got []recorded
	clock := time.Unix(1e9, 0)
	d := &DeniedEvents{Node: "g1", Every: time.Minute, Remembered: 3, now: func() time.Time { return clock },
		Record: func(ref *corev1.ObjectReference, typ, why, what string) {
			got = append(got, recorded{*ref, typ, why, what})
		}}
	web := natlog.Pod{Namespace: "shop", Name: "web", UID: "u1"}
	sample := func(pod natlog.Pod, dst string, port uint16) gateway.DropSample {
		return gateway.DropSample{Reason: gateway.DropDeniedDestination, Proto: 6, Src: nsPod, Dst: netip.MustParseAddr(dst),
			SrcPort: 40000 + port, DstPort: port, HasPorts: true, Pod: pod}
	}
	for i := range 10 {
		d.handle(sample(web, "169.254.169.254", 80+uint16(i))) // one destination, ten connections
	}
	if len(got) != 1 {
		t.Fatalf("%d Events for one destination, want 1", len(got))
	}
	e := got[0]
	if e.ref != (corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "shop", Name: "web", UID: "u1"}) ||
		e.typ != corev1.EventTypeWarning || e.why != ReasonDestinationDenied ||
		!strings.Contains(e.what, "169.254.169.254 port 80 (tcp)") || !strings.Contains(e.what, "allowedDestinations") ||
		!strings.Contains(e.what, "[169.254.169.254/32]") || !strings.Contains(e.what, "gateway g1") {
		t.Errorf("Event %+v", e)
	}
	d.handle(sample(natlog.Pod{}, "169.254.169.254", 80)) // a config file's pod: nobody to tell
	other := sample(web, "10.0.0.9", 22)
	other.Reason = gateway.DropNotSelected
	d.handle(other)
	if len(got) != 1 {
		t.Fatalf("%d Events, want still 1", len(got))
	}
	d.handle(sample(web, "10.0.0.9", 22))
	clock = clock.Add(59 * time.Second)
	d.handle(sample(web, "169.254.169.254", 80))
	if len(got) != 2 {
		t.Fatalf("%d Events, want 2 (a second destination, the first still in its window)", len(got))
	}
	clock = clock.Add(time.Second)
	d.handle(sample(web, "169.254.169.254", 80))
	if len(got) != 3 {
		t.Fatalf("%d Events, want 3 (the window passed)", len(got))
	}
	for i := range 10 {
		d.handle(sample(web, fmt.Sprintf("10.1.0.%d", i), 22))
		if len(d.last) > 3 {
			t.Fatalf("%d pairs held, want at most Remembered (3)", len(d.last))
		}
	}
	if len(got) != 13 {
		t.Fatalf("%d Events, want 13: a full memory forgets, it does not go quiet", len(got))
	}
}

// TestDeniedEventKube runs the agent with the real engine against a real
// kube-apiserver, with the gateway's RBAC: many packets of a selected pod
// to a denied destination make exactly one EgressDestinationDenied Event
// on the pod (count 1), naming the destination and allowedDestinations,
// from source egret-gateway.
func TestDeniedEventKube(t *testing.T) {
	tp, _ := newNsTopo(t) // first: needs root, fails under CI=true without it
	k := startGatewayCluster(t, gatewayWithEvents)
	k.place("g1")
	cs, ctx, p := k.cs, context.Background(), k.web

	src, err := NewKubeSource(k.env.UserConfig(t, gatewayUser, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	// As the command wires it (cmd/egret agentDataPlane.start).
	denied := &DeniedEvents{Node: "g1", Record: src.Event, Log: testLog(t)}
	a := &Agent{Node: "g1", Source: src, Log: testLog(t),
		Base: config.Spec{Interfaces: []string{"d0"}, Mode: "afxdp", Tunnel: config.TunnelVXLAN, VNI: nsVNI, RouterV4: netip.MustParseAddr("169.254.78.1")},
		StartDataPlane: func(s *config.Settled) (DataPlane, error) {
			e, err := engine.New(s, engine.Options{Logger: testLog(t)})
			if err != nil {
				return nil, err
			}
			e.Start()
			t.Cleanup(denied.Follow(context.Background(), e.Pipeline()))
			return e, nil
		}}
	runAgent(t, tp, a, "")
	nstest.Eventually(t, "egress IP claimed", 20*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })

	events := func(dst netip.Addr) []corev1.Event {
		l, err := cs.CoreV1().Events("shop").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.uid": string(p.UID), "reason": ReasonDestinationDenied}.String()})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for _, e := range l.Items {
			if strings.Contains(e.Message, dst.String()+" port") {
				out = append(out, e)
			}
		}
		return out
	}
	for i := range 200 {
		if err := tp.raw.Send(tp.podTo(t, nsDenied, uint16(30000+i))); err != nil {
			t.Fatal(err)
		}
	}
	// A second destination, after them: once its Event is there, every
	// sample of the first went through the agent before it.
	second := netip.MustParseAddr("169.254.1.1")
	nstest.Until(t, "an Event for the second destination", 20*time.Second, func() (bool, string) {
		if err := tp.raw.Send(tp.podTo(t, second, 29999)); err != nil {
			t.Fatal(err)
		}
		n := len(events(second))
		return n > 0, fmt.Sprintf("%d Events", n)
	})
	got := events(nsDenied)
	if len(got) != 1 || got[0].Count != 1 {
		t.Fatalf("%d Events for %v (%+v), want exactly one with count 1", len(got), nsDenied, got)
	}
	ev := got[0]
	if ev.Type != corev1.EventTypeWarning || ev.Source.Component != "egret-gateway" || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != "web" ||
		!strings.Contains(ev.Message, "169.254.169.254 port 53 (udp)") || !strings.Contains(ev.Message, "allowedDestinations") {
		t.Errorf("Event %s %s from %+v on %+v: %q", ev.Type, ev.Reason, ev.Source, ev.InvolvedObject, ev.Message)
	}
	if n := len(events(second)); n != 1 {
		t.Errorf("%d Events for %v, want 1 however often it was sent", n, second)
	}
}
