package steer

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/plan"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	benchPods     = 10000
	benchObjects  = 4
	benchPrefixes = 1000
)

// benchInputs: benchPods pods in benchObjects namespaces, each namespace
// selected by one object on g1; with prefixes, each object has a
// trafficSelector picking benchPrefixes networks of its own.
func benchInputs(prefixes bool, pods, extra int) Inputs {
	in := Inputs{Node: "w1", Namespaces: map[string]map[string]string{},
		VTEPs: map[string][]netip.Addr{"g1": {g1VTEP}, "g2": {g2VTEP}}, NodeKnown: true, NodePodCIDRs: []string{"198.18.0.0/16"}}
	for i := range benchObjects {
		ns := fmt.Sprintf("ns%d", i)
		in.Namespaces[ns] = map[string]string{"team": ns}
		ip := fmt.Sprintf("192.0.2.%d", 101+i)
		e := eip(fmt.Sprintf("o%d", i), match("team", ns), metav1.LabelSelector{}, []string{ip}, "g1", ip)
		if prefixes {
			e.Spec.TrafficSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": e.Name}}
			var nets []string
			for j := range benchPrefixes + extra*btoi(i == 0) {
				nets = append(nets, fmt.Sprintf("100.%d.%d.0/24", 64+i*4+j/256, j%256))
			}
			in.Traffic = append(in.Traffic, traffic("t"+e.Name, e.Name, false, nets...))
		}
		in.EgressIPs = append(in.EgressIPs, e)
	}
	for k := range pods {
		a := netip.AddrFrom4([4]byte{198, 18, byte(k / 250), byte(k%250 + 1)})
		in.Pods = append(in.Pods, Pod{Namespace: fmt.Sprintf("ns%d", k%benchObjects), Name: fmt.Sprintf("p%d", k), Node: "w1", IPs: []netip.Addr{a}})
	}
	return in
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkApplyByDestination times Desired and Apply into a real
// network namespace for 10k pods whose objects have 1k destination
// prefixes each (dest) against the same pods and objects without prefixes
// (base, an ip rule per pod), interleaved in every iteration, and reports
// both and their ratio, in total and for Apply alone, and the time of
// Plan.Worker in the dest case: from scratch (full), after one pod comes or goes
// (pod), after one prefix comes or goes (prefix; dest only, base has none).
//
//	CI=true go test -run '^$' -bench ApplyByDestination -benchtime 3x ./control/steer/
func BenchmarkApplyByDestination(b *testing.B) {
	requirePrivileged(b)
	cfg := testConfig()
	cfg.PodCIDRs = []string{"198.18.0.0/16"}
	kernels := map[bool]*Kernel{}
	for _, prefixes := range []bool{false, true} {
		l := buildLab(b)
		kernels[prefixes] = setupKernel(b, cfg, l.nodeH)
	}
	// The plans are built once, outside the timings: the plan is the
	// controller's and every agent's, not steer's.
	plans := map[[3]int]*plan.Plan{}
	inputs := func(prefixes bool, pods, extra int) *plan.Plan {
		key := [3]int{btoi(prefixes), pods, extra}
		if pl, ok := plans[key]; ok {
			return pl
		}
		plans[key] = plan.Build(benchInputs(prefixes, pods, extra).view(), plan.Options{})
		return plans[key]
	}
	// apply returns the time of Desired and of Apply.
	apply := func(b *testing.B, prefixes bool, pl *plan.Plan) timing {
		k := kernels[prefixes]
		start := time.Now()
		st := Desired(pl, "w1", k.Params())
		mid := time.Now()
		if len(st.Problems) != 0 {
			b.Fatalf("problems: %v", st.Problems[:1])
		}
		if prefixes != (len(st.Classes) > 0) || len(st.Selected) < benchPods-2 {
			b.Fatalf("prefixes %v: %d classes, %d selected", prefixes, len(st.Classes), len(st.Selected))
		}
		if _, err := k.Apply(st); err != nil {
			b.Fatal(err)
		}
		t := timing{desired: mid.Sub(start), apply: time.Since(mid)}
		// The plan's own share of Desired, timed apart: Plan.Worker.
		w := time.Now()
		pl.Worker("w1", k.VTEP())
		t.worker = time.Since(w)
		return t
	}
	report := func(b *testing.B, base, dest timing) {
		n := float64(b.N)
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
		b.ReportMetric(0, "ns/op")
		if base.total() > 0 {
			b.ReportMetric(ms(base.total()), "base-ms/op")
			b.ReportMetric(ms(base.apply), "base-apply-ms/op")
			b.ReportMetric(float64(dest.total())/float64(base.total()), "dest/base")
			b.ReportMetric(float64(dest.apply)/float64(base.apply), "dest/base-apply")
		}
		b.ReportMetric(ms(dest.total()), "dest-ms/op")
		b.ReportMetric(ms(dest.apply), "dest-apply-ms/op")
		b.ReportMetric(ms(dest.worker), "dest-worker-ms/op")
	}

	b.Run("full", func(b *testing.B) {
		var base, dest timing
		for range b.N {
			for _, prefixes := range []bool{false, true} {
				b.StopTimer()
				if err := kernels[prefixes].Cleanup(); err != nil {
					b.Fatal(err)
				}
				if err := kernels[prefixes].Setup(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				d := apply(b, prefixes, inputs(prefixes, benchPods, 0))
				if prefixes {
					dest.add(d)
				} else {
					base.add(d)
				}
			}
		}
		report(b, base, dest)
	})
	b.Run("pod", func(b *testing.B) {
		var base, dest timing
		for i := range b.N {
			for _, prefixes := range []bool{false, true} {
				b.StopTimer()
				apply(b, prefixes, inputs(prefixes, benchPods, 0))
				b.StartTimer()
				d := apply(b, prefixes, inputs(prefixes, benchPods-1-i%2, 0))
				if prefixes {
					dest.add(d)
				} else {
					base.add(d)
				}
			}
		}
		report(b, base, dest)
	})
	b.Run("prefix", func(b *testing.B) {
		var dest timing
		for i := range b.N {
			b.StopTimer()
			apply(b, true, inputs(true, benchPods, 0))
			b.StartTimer()
			dest.add(apply(b, true, inputs(true, benchPods, 1+i%2)))
		}
		report(b, timing{}, dest)
	})
}

// timing is the time of Desired and of Apply, and apart of them of
// Plan.Worker (which Desired calls).
type timing struct{ desired, apply, worker time.Duration }

func (t *timing) add(o timing)        { t.desired += o.desired; t.apply += o.apply; t.worker += o.worker }
func (t timing) total() time.Duration { return t.desired + t.apply }
