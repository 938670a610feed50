package status

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	corev1 "k8s.io/api/core/v1"
)

// objects is every EgressIP of v, in name order, as the plan uses it.
func objects(v cluster.View, pl *plan.Plan, in Inputs) []EgressIP {
	usable := map[string]*plan.Object{}
	for i := range pl.Objects {
		usable[pl.Objects[i].Name] = &pl.Objects[i]
	}
	eips := slices.DeleteFunc(slices.Clone(v.EgressIPs), func(e *egressv1.EgressIP) bool { return e == nil })
	slices.SortStableFunc(eips, func(a, b *egressv1.EgressIP) int { return cmp.Compare(a.Name, b.Name) })
	eips = slices.CompactFunc(eips, func(a, b *egressv1.EgressIP) bool { return a.Name == b.Name })

	type check struct {
		obj, ip              int
		addr                 netip.Addr
		node, standby, label string
	}
	var checks []check
	out := make([]EgressIP, 0, len(eips))
	for _, e := range eips {
		o := EgressIP{Name: e.Name, IPs: []IP{}, Problems: []string{}, Events: recentEvents(in.Events, e)}
		for _, err := range pl.Problems {
			// A pod's problems go to the pod, even when they name its object.
			if msg := err.Error(); !strings.HasPrefix(msg, "pod ") && mentionsObject(msg, e.Name) {
				o.Problems = append(o.Problems, msg)
			}
		}
		po := usable[e.Name]
		if po == nil && len(o.Problems) == 0 {
			o.Problems = append(o.Problems, "the agents do not use it")
		}
		for _, s := range e.Spec.EgressIPs {
			ip := IP{IP: s, StandbyState: SyncNone}
			a, err := egressv1.ParseEgressIP(s)
			node := ""
			if po != nil && err == nil {
				if i := slices.IndexFunc(po.Placements, func(p plan.Placement) bool { return p.IP == a }); i >= 0 {
					node = po.Placements[i].Node
				}
			}
			switch {
			case err != nil:
				o.Problems = append(o.Problems, fmt.Sprintf("egress IP %v", err))
			case node == "":
				o.Problems = append(o.Problems, s+" is not assigned to a node"+explained(o.Events, s))
			default:
				ip.Node = &node
				sb := po.Standbys[a]
				if sb == "" || sb == node {
					o.Problems = append(o.Problems, fmt.Sprintf("%s on %s has no standby%s: its connections are lost if %s fails", s, node, explained(o.Events, s), node))
					break
				}
				ip.Standby = &sb
				checks = append(checks, check{obj: len(out), ip: len(o.IPs), addr: a, node: node, standby: sb, label: s})
			}
			o.IPs = append(o.IPs, ip)
		}
		out = append(out, o)
	}

	var wg sync.WaitGroup
	for _, c := range checks {
		ip := &out[c.obj].IPs[c.ip]
		if in.Standby == nil {
			ip.StandbyState, ip.StandbyDetail = SyncUnknown, in.UnknownWhy
			continue
		}
		wg.Go(func() { ip.StandbyState, ip.StandbyDetail = in.Standby(c.addr, c.node, c.standby) })
	}
	wg.Wait()
	for _, c := range checks {
		if ip := out[c.obj].IPs[c.ip]; ip.StandbyState == SyncBehind {
			o := &out[c.obj]
			o.Problems = append(o.Problems, fmt.Sprintf("the standby %s of %s is behind: %s", c.standby, c.label, ip.StandbyDetail))
		}
	}
	return out
}

// explained is ": <message> (<reason>)" of the newest Warning Event that
// names ip, or "" when none does.
func explained(events []Event, ip string) string {
	for _, e := range events {
		if e.Type == corev1.EventTypeWarning && mentions(e.Message, ip) {
			return fmt.Sprintf(": %s (%s)", e.Message, e.Reason)
		}
	}
	return ""
}

// recentEvents are the newest MaxEvents Events about e, newest first.
func recentEvents(all []corev1.Event, e *egressv1.EgressIP) []Event {
	out := []Event{}
	for _, ev := range all {
		ref := ev.InvolvedObject
		if ref.Kind != egressv1.Kind || ref.Name != e.Name || (ref.UID != "" && e.UID != "" && ref.UID != e.UID) {
			continue
		}
		n := ev.Count
		if ev.Series != nil {
			n = ev.Series.Count
		}
		out = append(out, Event{Type: ev.Type, Reason: ev.Reason, Message: ev.Message, Count: max(n, 1), LastSeen: eventTime(ev)})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return b.LastSeen.Compare(a.LastSeen) })
	return out[:min(len(out), MaxEvents)]
}

// eventTime is when ev last happened, from whichever field its recorder set.
func eventTime(ev corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// mentionsObject reports whether a problem of the plan is about EgressIP
// name: it writes `EgressIP name` or `EgressIP "name"`.
func mentionsObject(msg, name string) bool {
	return mentions(msg, "EgressIP "+name) || mentions(msg, `EgressIP "`+name+`"`)
}

// mentions reports whether text names token whole: not run on from or
// into a longer name or address ("blue" is not in "blue-2", 192.0.2.1 not
// in 192.0.2.10); a '.' or ':' right after it that ends a sentence or a
// clause does not continue it.
func mentions(text, token string) bool {
	for i := 0; i <= len(text); {
		j := strings.Index(text[i:], token)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(token)
		if (start == 0 || !nameByte(text[start-1])) && !continues(text, end) {
			return true
		}
		i = start + 1
	}
	return false
}

func continues(text string, end int) bool {
	if end >= len(text) {
		return false
	}
	switch b := text[end]; {
	case b == '.' || b == ':':
		return end+1 < len(text) && alnum(text[end+1])
	default:
		return nameByte(b)
	}
}

func nameByte(b byte) bool {
	return alnum(b) || b == '-' || b == '_' || b == '.' || b == ':' || b == '/'
}

func alnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
