package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	"github.com/egret-gw/egret/lab"
)

// labTarget is one egret process of the lab whose metrics Prometheus scrapes.
type labTarget struct {
	job, instance string
	ns, addr      string // the process's metrics address inside its namespace
}

// forward listens on a root-namespace loopback port and carries each
// connection to addr inside namespace ns. The lab's processes serve their
// metrics on their namespace's loopback (the gateway's and steer's
// default), which nothing outside the namespace can reach; a connection
// is dialed anew each time, so a restarted process is scraped again.
func forward(t *testing.T, ns, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				up, err := lab.DialContext(ctx, ns, "tcp", addr)
				cancel()
				if err != nil {
					return // Prometheus records the target as down
				}
				defer up.Close()
				done := make(chan struct{})
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); close(done) }()
				io.Copy(c, up)
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// labTraffic runs until stop: new HTTP connections and UDP exchanges from
// the selected pods (flows created and, after the UDP timeout, expired),
// and unsolicited UDP from the server to every egress IP, which the
// gateway that hosts it drops (drops by reason).
func labTraffic(t *testing.T, s *lab.Spec, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	srvHTTP := netip.AddrPortFrom(s.Server.IP, lab.HTTPPort).String()
	srvUDP := netip.AddrPortFrom(s.Server.IP, lab.UDPPort).String()
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			if p.Policy == "" {
				continue
			}
			ns := s.NS(p.Name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(40 * time.Millisecond):
					}
					lab.HTTPSource(ns, srvHTTP, time.Second)
					lab.UDPSource(ns, srvUDP, time.Second)
				}
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc, err := lab.ListenPacket(s.NS(s.Server.Name), "udp4", ":0")
		if err != nil {
			t.Errorf("unsolicited traffic from the server: %v", err)
			return
		}
		defer pc.Close()
		var eips []netip.Addr
		for i := 101; i <= 103; i++ {
			eips = append(eips, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, a := range eips {
				pc.WriteTo([]byte("unsolicited"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 40999)))
			}
		}
	}()
	return &wg
}

// TestPrometheusLab is issue 7's proof on the real lab in managed mode:
// the real `egret controller`, three `egret gateway` agents (XDP +
// AF_XDP) and two `egret steer` agents in network namespaces, real pods
// sending traffic, and Debian's Prometheus scraping every one of them
// through their real /metrics endpoints. A gateway is killed (SIGKILL)
// part-way so that the failover series get data, and started again.
// Every PromQL expression of the dashboard must return data, every alert
// rule must evaluate without error, and series each role must have are
// checked by value. With EGRET_DASHBOARD_PNG set the dashboard's main
// panels are rendered from this run's range queries to that file.
func TestPrometheusLab(t *testing.T) {
	if testing.Short() {
		t.Skip("builds egret, starts the lab and Prometheus, ~60 s")
	}
	promBin := need(t, "prometheus")
	for _, c := range []string{"ip", "bridge", "nft", "ethtool", "sysctl"} {
		need(t, c)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the lab needs root (CI=true demands the test runs)")
		}
		t.Skip("the lab needs root")
	}

	dir := t.TempDir()
	bin := testbin.Build(t, "egret")
	// "elt" + kind + pid: the lab tests' scheme, so a crashed run's lab is
	// removed by the next lab test.
	name := "eltp" + strconv.FormatInt(int64(os.Getpid()), 36)
	spec, err := lab.DefaultSpec(name)
	if err != nil {
		t.Fatal(err)
	}
	l := &lab.Lab{Spec: spec, Impl: lab.Managed{Binary: bin, DualStack: true}, Binary: bin}
	lab.Down("", name)
	upStart := time.Now()
	if err := l.Up(); err != nil {
		lab.Down("", name)
		t.Fatalf("lab up (managed): %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(l.RunDir(), "*.log"))
			for _, f := range logs {
				b, _ := os.ReadFile(f)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("%s:\n%s", filepath.Base(f), strings.Join(lines[max(0, len(lines)-8):], "\n"))
			}
		}
		if err := lab.Down("", name); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	t.Logf("lab %s up in managed mode in %v", name, time.Since(upStart).Round(time.Millisecond))

	var targets []labTarget
	for _, g := range spec.Gateways {
		targets = append(targets, labTarget{"egret-gateway", g.Name, spec.NS(g.Name), DefaultGatewayAddr})
	}
	targets = append(targets, labTarget{"egret-controller", spec.Controller.Name, spec.NS(spec.Controller.Name), "127.0.0.1" + DefaultControllerAddr})
	for _, w := range spec.Workers {
		targets = append(targets, labTarget{"egret-steer", w.Name, spec.NS(w.Name), DefaultSteerAddr})
	}
	var scrape strings.Builder
	for _, job := range []string{"egret-gateway", "egret-controller", "egret-steer"} {
		fmt.Fprintf(&scrape, "- job_name: %s\n  static_configs:\n", job)
		for _, tg := range targets {
			if tg.job == job {
				fmt.Fprintf(&scrape, "  - {targets: [%q], labels: {instance: %q}}\n", forward(t, tg.ns, tg.addr), tg.instance)
			}
		}
	}
	rules, err := filepath.Abs(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n%s", rules, scrape.String())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	promStart := time.Now()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			lines := strings.Split(string(b), "\n")
			t.Logf("prometheus log tail:\n%s", strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	})
	api := promAPI{base: "http://" + web}

	stop := make(chan struct{})
	traffic := labTraffic(t, spec, stop)
	stopTraffic := sync.OnceFunc(func() { close(stop); traffic.Wait() })
	t.Cleanup(stopTraffic)

	// Every process is scraped: 3 gateways, the controller, 2 steer agents.
	var r *vecResult
	if !nstest.Soon(60*time.Second, func() bool {
		r, err = api.query(`count_over_time(up[10s]) >= 5 and up == 1`)
		return err == nil && len(r.Result) == len(targets)
	}) {
		t.Fatalf("Prometheus does not scrape all %d lab processes: %v %+v", len(targets), err, r)
	}

	// A failover: kill the gateway hosting the first egress IP, wait for
	// its IPs to move and traffic to use them, then start it again.
	st, err := l.Status()
	if err != nil || len(st.Assignment) == 0 {
		t.Fatalf("lab status: %v %+v", err, st)
	}
	victim := st.Assignment[0].Node
	fo, err := l.Failover(victim, 10*time.Second)
	if err != nil {
		t.Fatalf("failover of %s: %v", victim, err)
	}
	t.Logf("failover of %s: status %.2f s, traffic %.2f s", victim, fo.StatusSeconds, fo.TrafficSeconds)
	if err := l.StartGateway(victim); err != nil {
		t.Fatalf("restart %s: %v", victim, err)
	}

	// Rates over the dashboard's 5 s window need the restarted gateway
	// scraped a few times (every scrape of the last 6 s up), and the run
	// long enough to draw.
	scraped := fmt.Sprintf(`count_over_time(up{instance=%q}[6s]) >= 5 and min_over_time(up{instance=%q}[6s]) == 1`, victim, victim)
	if !nstest.Soon(30*time.Second, func() bool {
		r, err = api.query(scraped)
		return err == nil && len(r.Result) == 1
	}) {
		t.Fatalf("Prometheus does not scrape the restarted %s: %v %+v", victim, err, r)
	}
	// The dashboard's image spans the run: wait until Prometheus holds 35
	// samples (35 s at its 1 s interval) of some target.
	if !nstest.Soon(60*time.Second, func() bool {
		r, err = api.query(`max(count_over_time(up[1m])) >= 35`)
		return err == nil && len(r.Result) == 1
	}) {
		t.Fatalf("Prometheus holds no 35 s of samples: %v %+v", err, r)
	}
	d := loadDashboard(t)
	n := 0
	for _, pn := range d.Panels {
		for _, tg := range pn.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			n++
			r, err := api.query(expr)
			switch {
			case err != nil:
				t.Errorf("panel %q: %s: %v", pn.Title, expr, err)
			case len(r.Result) == 0:
				t.Errorf("panel %q: %s returned no data", pn.Title, expr)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d dashboard expressions found", n)
	}
	t.Logf("%d dashboard expressions returned data", n)

	// Every egress IP of the lab's objects is assigned and hosted.
	eips, err := lab.EgressIPs(lab.ObjectsDir(l.RunDir()))
	if err != nil {
		t.Fatal(err)
	}
	nIPs := 0
	for _, e := range eips {
		nIPs += len(e.Spec.EgressIPs)
	}
	// Values each role must show after this run.
	for _, c := range []struct{ expr, why string }{
		{`sum(egret_gateway_forwarded_packets_total) > 100`, "pod packets forwarded by the gateways"},
		{`sum(egret_gateway_replied_packets_total) > 100`, "replies translated back"},
		{`sum(egret_gateway_interface_received_bytes_total{interface="eth0"}) > 10000`, "bytes received on eth0"},
		{`sum(egret_gateway_interface_sent_bytes_total{interface="eth0"}) > 10000`, "bytes sent on eth0"},
		{`count(egret_gateway_xdp_socket_fill_ring_empty_total{interface="eth0"}) == 3`, "AF_XDP statistics of every gateway"},
		{`sum(rate(egret_gateway_dropped_packets_total{reason="no_flow"}[10s])) > 0`, "unsolicited inbound dropped as no_flow"},
		{`sum(egret_gateway_flows_created_total) > 50`, "flows created"},
		{`sum(rate(egret_gateway_worker_busy_seconds_total[10s])) > 0`, "worker busy time"},
		{`max(rate(egret_gateway_worker_busy_seconds_total[10s])) < 1`, "busy ratio below 1"},
		{fmt.Sprintf(`sum(egret_gateway_egress_ips) == %d`, nIPs), fmt.Sprintf("%d egress IPs hosted in all (two of them the dual-stack object's)", nIPs)},
		{`min(egret_gateway_tunnel_peers and on (instance) egret_gateway_egress_ips > 0) >= 1`, "tunnel peers on every gateway hosting an egress IP"},
		{`sum(egret_gateway_nat_ports_max{protocol="tcp"}) > 0`, "NAT port range per egress IP"},
		{`sum(egret_gateway_claim_announcements_total{result="sent"}) >= 5`, "every claim announced (gratuitous ARP / unsolicited NA)"},
		{`sum(egret_gateway_claim_announcements_total{result="failed"}) == 0`, "no failed announcement"},
		{`sum(egret_gateway_neighbor_answers_total{result="sent"}) >= 1`, "ARP/ND for egress IPs answered by the gateways, not the fenced kernel"},
		{fmt.Sprintf(`egret_controller_failovers_total{node=%q} >= 1`, victim), "the failover away from " + victim},
		{`egret_controller_egress_ip_moves_total >= 1`, "egress IP moves"},
		{`egret_controller_leader == 1`, "a leading controller"},
		{fmt.Sprintf(`sum(egret_controller_egress_ips_assigned) == %d`, nIPs), fmt.Sprintf("%d egress IPs assigned", nIPs)},
		{fmt.Sprintf(`egret_controller_probe_failures_total{node=%q} >= 1`, victim), "failed probes of " + victim},
		{`count(egret_controller_node_reachable == 1) == 3`, "all 3 gateways reachable again"},
		{`egret_controller_status_writes_total >= 3`, "status writes"},
		{`min(egret_steer_rules) >= 1`, "policy rules on each worker"},
		{`min(egret_steer_routes) >= 1`, "steering routes on each worker"},
		{`sum(egret_steer_apply_errors_total) == 0`, "no steer apply errors"},
		{`count(egret_steer_fail_closed_drops_total) == 2`, "fail-closed drop counters readable on both workers"},
		{`count(egret_build_info) == 6`, "build info from every process"},
	} {
		r, err := api.query(c.expr)
		if err != nil || len(r.Result) == 0 {
			t.Errorf("%s: %s: no result (%v)", c.why, c.expr, err)
		}
	}

	if r, err := api.query(`egret_gateway_tunnel_peers`); err == nil {
		for _, x := range r.Result {
			t.Logf("tunnel peers of %s: %v", x.Metric["instance"], x.Value[1])
		}
	}

	checkRules(t, api)
	stopTraffic()
	png := os.Getenv("EGRET_DASHBOARD_PNG")
	if png == "" {
		png = filepath.Join(dir, "dashboard.png")
	}
	if err := renderDashboard(api, d, promStart, time.Now(), png); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() < 10000 {
		t.Fatalf("rendered dashboard %s: %v (size %v)", png, err, fi)
	}
	t.Logf("dashboard rendered to %s", png)
}
