package gwagent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/egret-gw/egret/gateway"
)

// ReasonDestinationDenied is the reason of the Event a pod gets when the
// gateway refused a connection of it because its destination is on the
// deny-list (gateway.DropDeniedDestination).
const ReasonDestinationDenied = "EgressDestinationDenied"

// Defaults of DeniedEvents.
const (
	// DefaultDeniedEvery is how often one pod is told about one destination.
	DefaultDeniedEvery = 5 * time.Minute
	// DefaultDeniedRemembered bounds the pod and destination pairs held.
	DefaultDeniedRemembered = 4096
	// DeniedSampleRate is the deny drops a second the data plane samples
	// for the Events (gateway.Pipeline.SubscribeDrops): a pod flooding a
	// denied destination costs the agent at most this much work.
	DeniedSampleRate = 20
)

// DeniedEvents tells a selected pod, with a Warning Event on it, that the
// gateway refused a connection of it because the destination is on the
// deny-list, naming the destination and the setting that opens it. It is
// fed the data plane's samples of deny drops and tells each pod about
// each destination at most once every Every.
type DeniedEvents struct {
	// Node is this gateway's node name, for the message.
	Node string
	// Record writes an Event (cluster.Source.Event).
	Record func(ref *corev1.ObjectReference, eventType, reason, message string)
	// Every is DefaultDeniedEvery and Remembered DefaultDeniedRemembered
	// when zero.
	Every      time.Duration
	Remembered int
	Log        *slog.Logger

	now  func() time.Time // time.Now; tests set it
	last map[deniedKey]time.Time
}

// deniedKey is a pod and a destination it was told about.
type deniedKey struct {
	pod types.UID
	ns  string
	pn  string
	dst netip.Addr
}

// Follow subscribes to p's deny drops and turns them into Events until
// ctx ends or the returned function is called.
func (d *DeniedEvents) Follow(ctx context.Context, p *gateway.Pipeline) (stop func()) {
	sub := p.SubscribeDrops(DeniedSampleRate, 2*DeniedSampleRate, gateway.DropDeniedDestination)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.run(ctx, sub.C)
	}()
	return func() {
		cancel()
		sub.Close()
		<-done
	}
}

func (d *DeniedEvents) run(ctx context.Context, samples <-chan gateway.DropSample) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-samples:
			if !ok {
				return
			}
			d.handle(s)
		}
	}
}

// handle records an Event for s unless its pod was told about its
// destination within Every. A drop of a pod the configuration does not
// name (a config file's) has nobody to tell.
func (d *DeniedEvents) handle(s gateway.DropSample) {
	if s.Reason != gateway.DropDeniedDestination || s.Pod.Name == "" {
		return
	}
	every, max := d.Every, d.Remembered
	if every <= 0 {
		every = DefaultDeniedEvery
	}
	if max <= 0 {
		max = DefaultDeniedRemembered
	}
	now := time.Now()
	if d.now != nil {
		now = d.now()
	}
	if d.last == nil {
		d.last = make(map[deniedKey]time.Time)
	}
	k := deniedKey{pod: types.UID(s.Pod.UID), ns: s.Pod.Namespace, pn: s.Pod.Name, dst: s.Dst}
	if t, ok := d.last[k]; ok && now.Sub(t) < every {
		return
	}
	if _, ok := d.last[k]; !ok && len(d.last) >= max {
		d.forget(now, every, max)
	}
	d.last[k] = now
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: s.Pod.Namespace, Name: s.Pod.Name, UID: types.UID(s.Pod.UID)}
	d.Record(ref, corev1.EventTypeWarning, ReasonDestinationDenied, deniedMessage(d.Node, s))
	if d.Log != nil {
		d.Log.Info("gateway agent: a pod's connection hit the deny-list; Event recorded", "pod", s.Pod.Namespace+"/"+s.Pod.Name, "destination", s.Dst)
	}
}

// forget makes room for one more pair: it drops the pairs told longer
// than every ago, or else the oldest.
func (d *DeniedEvents) forget(now time.Time, every time.Duration, max int) {
	var oldest deniedKey
	var ot time.Time
	for k, t := range d.last {
		if now.Sub(t) >= every {
			delete(d.last, k)
			continue
		}
		if ot.IsZero() || t.Before(ot) {
			oldest, ot = k, t
		}
	}
	if len(d.last) >= max && !ot.IsZero() {
		delete(d.last, oldest)
	}
}

// deniedMessage names the destination, the connection and the settings
// that open it. The pod's own port is left out, so that the recorder
// aggregates repeats into one Event's count.
func deniedMessage(node string, s gateway.DropSample) string {
	what := "to " + s.Dst.String()
	switch {
	case s.HasPorts:
		what = fmt.Sprintf("to %v port %d (%s)", s.Dst, s.DstPort, protoName(s.Proto))
	case s.HasICMP:
		what = fmt.Sprintf("to %v (%s type %d)", s.Dst, protoName(s.Proto), s.ICMPType)
	}
	return fmt.Sprintf("gateway %s refused a connection %s: the destination is on the gateway's deny-list "+
		"(link-local and metadata addresses, loopback, the nodes' InternalIPs and host-cidrs subnets, deniedDestinations). "+
		"To let selected pods reach it through their egress IP, add it to the gateway's allowedDestinations "+
		"(ConfigMap egret-gateway; Helm value gateway.allowedDestinations), e.g. [%s]", node, what, netip.PrefixFrom(s.Dst, s.Dst.BitLen()))
}

func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return fmt.Sprintf("protocol %d", p)
}
