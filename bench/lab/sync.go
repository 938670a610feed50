package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/lab"
)

// The sides that measure what the flow sync costs the gateway: the gateway
// agent as the DaemonSet runs it, on the managed lab (the real controller
// assigns the egress IPs and picks their standbys), without the sync's key
// and with it. Their ratio is the sync's cost; against the egret side they
// would also measure agent mode.
const (
	sideSyncOff = "sync-off"
	sideSyncOn  = "sync-on"
)

// pickSync returns the scenarios that flag (-sync, -natlog) names:
// single-queue, IPv4 underlay (the managed lab's default), flows kept from
// one pod.
func pickSync(flag, names string) ([]scenario, error) {
	if names == "" {
		return nil, nil
	}
	scs, err := pick(names, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	for _, sc := range scs {
		if sc.Underlay != lab.UnderlayIPv4 || sc.Queues > 1 {
			return nil, fmt.Errorf("%s: scenario %s runs on its own lab (%s underlay, %d queues); these sides run single-queue IPv4 scenarios", flag, sc.Name, sc.Underlay, max(sc.Queues, 1))
		}
	}
	return scs, nil
}

// managedTarget is where the managed lab's controller put pod w1-p1's
// traffic: the gateway that hosts the first (by address) of its object's
// egress IPs, and that IP's standby. With sync, it waits until the standby
// is named and the gateway has opened its sync session (a full resync
// counted).
func managedTarget(l *lab.Lab, sync bool) (target, string, error) {
	spec := l.Spec
	pod := spec.Workers[0].Pods[0]
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := l.Status()
		if err != nil {
			return target{}, "", err
		}
		var mine []lab.AssignmentStatus
		for _, a := range st.Assignment {
			if a.EgressIP == pod.Policy {
				mine = append(mine, a)
			}
		}
		slices.SortFunc(mine, func(a, b lab.AssignmentStatus) int { return a.IP.Compare(b.IP) })
		if len(mine) > 0 && (!sync || mine[0].Standby != "") {
			a := mine[0]
			gw := spec.Gateway(a.Node)
			if gw == nil {
				return target{}, "", fmt.Errorf("egress IP %v is on %q, not a gateway of the lab", a.IP, a.Node)
			}
			if sync && !sessionUp(spec, gw.Name) {
				if time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				return target{}, "", fmt.Errorf("gateway %s has no flow sync session to its standby %s after 20 s", gw.Name, a.Standby)
			}
			return target{gw: gw, egress: a.IP, innerMAC: cluster.VTEPMAC(gw.IP)}, a.Standby, nil
		}
		if time.Now().After(deadline) {
			return target{}, "", fmt.Errorf("object %q of pod %s has no egress IP with a standby after 20 s: %+v", pod.Policy, pod.Name, mine)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessionUp reports whether gateway gw has opened a sync session to a
// standby: every session starts with a full resync, counted.
func sessionUp(spec *lab.Spec, gw string) bool {
	m, err := gatewayCounters(spec, gw)
	return err == nil && m["egret_gateway_sync_full_resyncs_total"] > 0
}

// syncStats is what the flow sync did during one scenario on the sync-on
// side: the primary's counters over the scenario and the standby's backup
// flows at its end. It shows the sync was on and in step (a sync that
// stalled or sent nothing would cost nothing).
type syncStats struct {
	Primary            string `json:"primary"`
	Standby            string `json:"standby"`
	RecordsSent        uint64 `json:"records_sent"`
	BytesSent          uint64 `json:"bytes_sent"`
	FullResyncs        uint64 `json:"full_resyncs"`
	Stalls             uint64 `json:"stalls"`
	PrimaryFlows       uint64 `json:"primary_flows"`
	StandbyBackupFlows uint64 `json:"standby_backup_flows"`
}

// gatewayMetricsAddr is where the lab's gateway agents serve /metrics, in
// their namespaces: the default, metrics.DefaultGatewayAddr (only commands
// import the metrics package).
const gatewayMetricsAddr = "127.0.0.1:9110"

// gatewayCounters reads the egret_gateway_* and egret_natlog_* series without labels from
// gateway gw's metrics endpoint, in its namespace.
func gatewayCounters(spec *lab.Spec, gw string) (map[string]uint64, error) {
	ns := spec.NS(gw)
	client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return lab.DialContext(ctx, ns, network, addr)
		}}}
	resp, err := client.Get("http://" + gatewayMetricsAddr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", gw, err)
	}
	defer resp.Body.Close()
	m := map[string]uint64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !(strings.HasPrefix(name, "egret_gateway_") || strings.HasPrefix(name, "egret_natlog_")) || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil && f >= 0 {
			m[name] = uint64(f)
		}
	}
	return m, sc.Err()
}

// measureSync runs fn (a scenario on the sync-on side) and returns what the
// sync from primary to standby did meanwhile.
func measureSync(spec *lab.Spec, primary, standby string, fn func() error) (*syncStats, error) {
	before, err := gatewayCounters(spec, primary)
	if err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, err
	}
	after, err := gatewayCounters(spec, primary)
	if err != nil {
		return nil, err
	}
	sb, err := gatewayCounters(spec, standby)
	if err != nil {
		return nil, err
	}
	d := func(k string) uint64 { return after[k] - before[k] }
	return &syncStats{Primary: primary, Standby: standby,
		RecordsSent: d("egret_gateway_sync_records_sent_total"), BytesSent: d("egret_gateway_sync_sent_bytes_total"),
		FullResyncs: d("egret_gateway_sync_full_resyncs_total"), Stalls: d("egret_gateway_sync_stalls_total"),
		PrimaryFlows: after["egret_gateway_flows"], StandbyBackupFlows: sb["egret_gateway_sync_backup_flows"]}, nil
}
