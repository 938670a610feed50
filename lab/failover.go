package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// FailoverResult is what Failover measured.
type FailoverResult struct {
	// Gateway is the gateway whose `egret gateway` was killed.
	Gateway string `json:"gateway"`
	// Moved are its egress IPs with the nodes that host them afterwards.
	Moved []AssignmentStatus `json:"moved"`
	// Pod is the pod whose new connections were watched.
	Pod string `json:"pod"`
	// Killed is when the kill was sent: the instant the times count from,
	// for whoever watches other traffic meanwhile (bench/failover); Dead is
	// when the process was gone: traffic answered later did not pass it.
	Killed time.Time `json:"killed"`
	Dead   time.Time `json:"dead"`
	// StatusSeconds is the time from the kill until the status files show
	// every moved IP on another node.
	StatusSeconds float64 `json:"status_seconds"`
	// TrafficSeconds is the time from the kill until the first successful
	// HTTP request from Pod that the server saw with a moved egress IP.
	TrafficSeconds float64 `json:"traffic_seconds"`
	// Attempts and Failed count the HTTP requests sent meanwhile.
	Attempts int `json:"attempts"`
	Failed   int `json:"failed"`
}

// Seconds is the failover time: the later of the status change and the
// first request served with a moved egress IP.
func (r *FailoverResult) Seconds() float64 { return max(r.StatusSeconds, r.TrafficSeconds) }

// Failover kills gateway gw's agent and data plane (managed mode) and
// measures how long its egress IPs take to move: until the controller's
// status shows them on other nodes, and until a new HTTP connection from a
// pod that uses one of them succeeds and the server sees that egress IP.
// It gives up after wait.
func (l *Lab) Failover(gw string, wait time.Duration) (*FailoverResult, error) {
	st, err := l.Status()
	if err != nil {
		return nil, err
	}
	if st.Mode != ModeManaged {
		return nil, fmt.Errorf("failover needs a lab in managed mode, %s is in %q", l.Spec.Name, st.Mode)
	}
	res := &FailoverResult{Gateway: gw}
	var moved []netip.Addr
	for _, a := range st.Assignment {
		if a.Node == gw {
			res.Moved = append(res.Moved, AssignmentStatus{EgressIP: a.EgressIP, IP: a.IP})
			moved = append(moved, a.IP)
		}
	}
	if len(moved) == 0 {
		return nil, fmt.Errorf("gateway %s hosts no egress IP; nothing would fail over", gw)
	}
	// Watch a pod of the object with the fewest egress IPs of the family
	// elsewhere, so that its new connections need a moved IP as often as
	// possible; IPv4 when a moved IP is IPv4, else over IPv6.
	best, bestLen, v6 := -1, 0, false
	for _, fam6 := range []bool{false, true} {
		for i, p := range st.Pods {
			srcs := p.ExpectedSources
			if fam6 {
				srcs = p.ExpectedSources6
			}
			if !slices.ContainsFunc(srcs, func(a netip.Addr) bool { return slices.Contains(moved, a) }) {
				continue
			}
			if best < 0 || len(srcs) < bestLen {
				best, bestLen, v6 = i, len(srcs), fam6
			}
		}
		if best >= 0 {
			break
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("no pod uses an egress IP of %s", gw)
	}
	pod := st.Pods[best]
	res.Pod = pod.Name
	srv := netip.AddrPortFrom(l.Spec.Server.IP, HTTPPort).String()
	if v6 {
		srv = netip.AddrPortFrom(l.Spec.Server.IP6, HTTPPort).String()
	}
	objs := ObjectsDir(l.RunDir())

	start := time.Now()
	res.Killed = start
	if err := l.KillGateway(gw); err != nil {
		return nil, err
	}
	res.Dead = time.Now()
	deadline := start.Add(wait)

	var wg sync.WaitGroup
	statusDone := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			eips, err := EgressIPs(objs)
			if err == nil {
				done := true
				for i := range res.Moved {
					m := &res.Moved[i]
					m.Node = ""
					for _, e := range eips {
						for _, it := range e.Status.Items {
							if e.Name == m.EgressIP && it.EgressIP == m.IP.String() && it.Node != gw {
								m.Node = it.Node
							}
						}
					}
					done = done && m.Node != ""
				}
				if done {
					res.StatusSeconds = time.Since(start).Seconds()
					statusDone <- nil
					return
				}
			}
			if time.Now().After(deadline) {
				statusDone <- fmt.Errorf("the status still shows %v on %s (or unassigned) %v after the kill", moved, gw, wait)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// A new connection every 100 ms, each allowed a second: the first one
	// served with a moved IP ends the measurement.
	type answer struct {
		at   time.Time
		seen netip.Addr
		err  error
	}
	// Buffered for every attempt, so late answers never block.
	answers := make(chan answer, int(wait/(100*time.Millisecond))+2)
	var trafficErr error
	tick := time.NewTicker(100 * time.Millisecond)
loop:
	for {
		select {
		case <-tick.C:
			if time.Now().After(deadline) {
				trafficErr = fmt.Errorf("no request from %s was served with %v within %v of the kill", pod.Name, moved, wait)
				break loop
			}
			res.Attempts++
			wg.Add(1)
			go func() {
				defer wg.Done()
				ap, err := HTTPSource(pod.Namespace, srv, time.Second)
				answers <- answer{time.Now(), ap.Addr(), err}
			}()
		case a := <-answers:
			if a.err != nil {
				res.Failed++
				continue
			}
			if slices.Contains(moved, a.seen) {
				res.TrafficSeconds = a.at.Sub(start).Seconds()
				break loop
			}
		}
	}
	tick.Stop()
	err = <-statusDone
	wg.Wait()
	return res, errors.Join(err, trafficErr)
}
