package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	"github.com/egret-gw/egret/lab"
)

// TestThroughGateway checks the guard against a measurement that bypassed
// the gateway: the server must have seen the egress IP, and the gateway
// must have sent out at least the bytes the server received.
func TestThroughGateway(t *testing.T) {
	egress := netip.MustParseAddr("192.0.2.101")
	ok := bulkRun{ReceivedBytes: 1000, ServerSaw: egress, GatewayOutBytes: 1100}
	if err := ok.throughGateway(egress); err != nil {
		t.Errorf("a run through the gateway: %v", err)
	}
	for name, r := range map[string]bulkRun{
		"nothing received":     {ServerSaw: egress, GatewayOutBytes: 1100},
		"another source":       {ReceivedBytes: 1000, ServerSaw: netip.MustParseAddr("192.0.2.12"), GatewayOutBytes: 1100},
		"gateway sent too few": {ReceivedBytes: 1000, ServerSaw: egress, GatewayOutBytes: 999},
	} {
		if err := r.throughGateway(egress); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}

// TestParseIperf3 reads the figures from iperf3's JSON and turns its error
// field into an error.
func TestParseIperf3(t *testing.T) {
	r, err := parseIperf3([]byte(`{"start":{"connected":[{"remote_host":"192.0.2.101"}]},"end":{"sum_sent":{"retransmits":7},"sum_received":{"bytes":125000000,"seconds":1,"bits_per_second":1e9}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Start.Connected[0].RemoteHost != "192.0.2.101" || r.End.SumSent.Retransmits != 7 || r.End.SumReceived.Bytes != 125000000 || r.End.SumReceived.BitsPerSecond != 1e9 {
		t.Errorf("parsed %+v", r)
	}
	if _, err := parseIperf3([]byte(`{"error":"unable to connect to server"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("iperf3's error: %v", err)
	}
	if _, err := parseIperf3([]byte("iperf3: error")); err == nil {
		t.Error("text taken for JSON")
	}
}

// TestBulkLab runs a short tcp-bulk on a real lab for each side and checks
// that its bytes went through the gateway: the receiver got some, the
// server saw the egress IP, the gateway's port and tasks counted the work.
// The same run from a pod that no policy selects (it leaves through its
// worker's masquerade, past every gateway) must fail that check.
func TestBulkLab(t *testing.T) {
	nstest.Root(t)
	if _, err := exec.LookPath("iperf3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("iperf3 is missing (make deps installs it)")
		}
		t.Skip("iperf3 is missing: make deps")
	}
	var sc scenario
	for _, s := range scenarios {
		if s.Name == "tcp-bulk" {
			sc = s
		}
	}
	if sc.Bulk == nil {
		t.Fatal("no tcp-bulk scenario")
	}
	bin := testbin.Build(t, "egret")
	gwCPU := min(1, runtime.NumCPU()-1)
	for _, mode := range []string{lab.ModeKernel, lab.ModeEgret} {
		t.Run(mode, func(t *testing.T) {
			spec, err := lab.NewSpec(fmt.Sprintf("ebt%d", os.Getpid()%100000), lab.UnderlayIPv4)
			if err != nil {
				t.Fatal(err)
			}
			impl, err := lab.NewImpl(mode, bin)
			if err != nil {
				t.Fatal(err)
			}
			l := &lab.Lab{Spec: spec, Impl: impl, Binary: bin}
			t.Cleanup(func() { lab.Down("", spec.Name) })
			if err := l.Up(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(restoreConntrack)
			b, err := newBulkLab(l, mode, sc, 0, gwCPU)
			if err != nil {
				t.Fatal(err)
			}
			gwNS := spec.NS(b.tg.gw.Name)
			var fwd0, rep0 float64
			if mode == lab.ModeEgret {
				fwd0, rep0 = egretCounter(t, gwNS, "egret_gateway_forwarded_packets_total"), egretCounter(t, gwNS, "egret_gateway_replied_packets_total")
			}
			r, err := b.run(spec.Workers[0].Pods[0], 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if mode == lab.ModeEgret {
				// Egret's own counters: every segment forwarded (at most
				// 1500 bytes of payload each), the ACKs translated back.
				fwd, rep := egretCounter(t, gwNS, "egret_gateway_forwarded_packets_total")-fwd0, egretCounter(t, gwNS, "egret_gateway_replied_packets_total")-rep0
				t.Logf("egret forwarded %.0f packets, replied %.0f", fwd, rep)
				if fwd < float64(r.ReceivedBytes)/1500 || rep == 0 {
					t.Errorf("egret forwarded %.0f packets for %d bytes received and replied %.0f: want ≥ %d and > 0", fwd, r.ReceivedBytes, rep, r.ReceivedBytes/1500)
				}
			}
			t.Logf("%s: %.2f Gbit/s, gateway in %d bytes, out %d, its tasks %.2f cores", mode, r.Gbps, r.GatewayInBytes, r.GatewayOutBytes, r.TaskCores)
			if err := r.throughGateway(b.tg.egress); err != nil {
				t.Error(err)
			}
			if r.Gbps <= 0 || r.GatewayInBytes < r.ReceivedBytes || r.TaskCores <= 0 {
				t.Errorf("%.2f Gbit/s, gateway in %d bytes for %d received, its tasks %.2f cores: want all above zero, and in ≥ received", r.Gbps, r.GatewayInBytes, r.ReceivedBytes, r.TaskCores)
			}
			// w2-p2 is selected by no policy.
			bypass := spec.Workers[1].Pods[1]
			if bypass.Policy != "" {
				t.Fatalf("pod %s has policy %s; the test needs one without", bypass.Name, bypass.Policy)
			}
			r, err = b.run(bypass, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.throughGateway(b.tg.egress); err == nil {
				t.Errorf("a run from %s, which no gateway forwards, passed as through the gateway (server saw %v, gateway out %d bytes for %d received)",
					bypass.Name, r.ServerSaw, r.GatewayOutBytes, r.ReceivedBytes)
			} else {
				t.Logf("bypass caught: %v", err)
			}
		})
	}
}

// TestBulkTable folds repetitions into medians and puts Egret over the
// kernel: Gbit/s, and the gateway tasks' CPU per Gbit/s.
func TestBulkTable(t *testing.T) {
	sc := scenario{Name: "tcp-bulk", Bulk: &bulk{Streams: 8, UnderlayMTU: 1500, PodMTU: 1450}}
	var runs []*bulkRun
	for i, g := range []float64{2, 4, 3} {
		runs = append(runs, &bulkRun{Scenario: sc, Mode: lab.ModeKernel, Rep: i, Gbps: g, TaskCoresPerGbps: 0.2, GatewayCoresPerGbps: 0.3})
		runs = append(runs, &bulkRun{Scenario: sc, Mode: lab.ModeEgret, Rep: i, Gbps: g / 2, TaskCoresPerGbps: 0.5, GatewayCoresPerGbps: 0.3})
	}
	rep := &report{Bulk: aggregateBulk(runs)}
	if len(rep.Bulk) != 2 || rep.Bulk[0].Gbps.Median != 3 || rep.Bulk[0].Gbps.Min != 2 || rep.Bulk[1].Gbps.Median != 1.5 || len(rep.Bulk[1].Reps) != 3 {
		t.Fatalf("aggregated %+v", rep.Bulk)
	}
	tab := rep.bulkTable()
	if !strings.Contains(tab, "| tcp-bulk | egret | 1.50 (1.00–2.00) | 0.500 (0.500–0.500) |") || !strings.Contains(tab, "| 0.50x | 2.50x |") {
		t.Errorf("table:\n%s", tab)
	}
	// A run of the bulk scenarios alone shows no empty NDR or latency table.
	if all := rep.tables(); all != tab {
		t.Errorf("the report's tables of a bulk-only run:\n%s", all)
	}
}

// egretCounter reads an unlabelled counter from the metrics of the Egret
// gateway in ns (the lab's gateways serve them on 127.0.0.1:9110).
func egretCounter(t *testing.T, ns, name string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return lab.DialContext(ctx, ns, network, addr)
	}}}
	resp, err := c.Get("http://127.0.0.1:9110/metrics")
	if err != nil {
		t.Fatalf("metrics in %s: %v", ns, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics in %s: %v", ns, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics in %s: %q: %v", ns, line, err)
			}
			return f
		}
	}
	t.Fatalf("metrics in %s have no %s", ns, name)
	return 0
}
