package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/gwagent"
	"github.com/egret-gw/egret/control/steer"
	"github.com/egret-gw/egret/gateway/config"
	"k8s.io/client-go/rest"
)

// agents times, in this process, what the steer agent of worker-000 (the
// worker with WorkerPods pods) and the gateway agent of the node hosting the
// most egress IPs do before they program anything: list and watch the
// cluster (cluster.Kube, the agents' source), then compute their
// configuration from it with their own functions (steer.Desired;
// gwagent.Build and Spec.Settle).
func agents(ctx context.Context, sc Scale, cfg *rest.Config, res *Result) error {
	fmt.Println("timing the agents' configuration builds ...")
	view := func(ctx context.Context, opts ...cluster.KubeOption) (cluster.View, float64, error) {
		src, err := cluster.NewKube(cfg, opts...)
		if err != nil {
			return cluster.View{}, 0, err
		}
		start := time.Now()
		if err := src.Start(ctx, func(cluster.Kind) {}); err != nil {
			return cluster.View{}, 0, err
		}
		return src.View(), time.Since(start).Seconds(), nil
	}

	worker := workerName(0)
	sctx, stop := context.WithCancel(ctx)                // ends the steer agent's watches
	v, synced, err := view(sctx, cluster.PodsOn(worker)) // as cmd/egret/steer.go
	if err != nil {
		stop()
		return fmt.Errorf("the steer agent's source: %w", err)
	}
	p := steer.Params{
		Excluded:   []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9"), netip.MustParsePrefix("10.0.0.0/16")},
		LocalVTEP:  workerAddr(0),
		TableBase:  steer.DefaultTableBase,
		TableCount: steer.DefaultTableCount,
		FailClosed: steer.FailClosedPodCIDR,
		PodCIDRs:   []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")},
		NoEgressIP: steer.NoEgressIPBlock,
	}
	start := time.Now()
	st := steer.DesiredFrom(v, worker, p)
	build := time.Since(start).Seconds()
	res.Steer = AgentResult{Node: worker, SyncSeconds: synced, BuildSeconds: build, Pods: len(st.Rules), Objects: len(st.Objects), Problems: len(st.Problems)}
	fmt.Printf("  steer agent of %s: caches synced in %.2f s, desired state in %.0f ms (%d pod rules, %d objects, %d problems)\n",
		worker, synced, build*1000, len(st.Rules), len(st.Objects), len(st.Problems))
	stop()

	gctx, gstop := context.WithCancel(ctx)
	defer gstop()
	v, synced, err = view(gctx)
	if err != nil {
		return fmt.Errorf("the gateway agent's source: %w", err)
	}
	gw, most := "", -1
	counts := map[string]int{}
	for _, e := range v.EgressIPs {
		for _, it := range e.Status.Items {
			counts[it.Node]++
		}
	}
	for n, c := range counts {
		if c > most || (c == most && n < gw) {
			gw, most = n, c
		}
	}
	base := config.Spec{Interfaces: []string{"eth0"}, Tunnel: config.TunnelVXLAN, VNI: 100}
	start = time.Now()
	r := gwagent.Build(base, gw, v, gwagent.Options{})
	built := time.Since(start)
	if _, err := r.Spec.Settle(); err != nil {
		return fmt.Errorf("the gateway configuration built for %s does not settle: %w", gw, err)
	}
	all := time.Since(start).Seconds()
	pods := 0
	for _, n := range r.Spec.Nodes {
		pods += len(n.Pods)
	}
	res.Gateway = AgentResult{Node: gw, SyncSeconds: synced, BuildSeconds: all, BuildOnlySeconds: built.Seconds(), Pods: pods, Objects: len(r.Spec.Policies), Hosted: len(r.Hosted), Problems: len(r.Problems)}
	fmt.Printf("  gateway agent of %s: caches synced in %.2f s, build + settle in %.0f ms (build %.0f ms; %d pods on %d nodes, %d policies, %d egress IPs hosted, %d problems)\n",
		gw, synced, all*1000, built.Seconds()*1000, pods, len(r.Spec.Nodes), len(r.Spec.Policies), len(r.Hosted), len(r.Problems))
	return nil
}
