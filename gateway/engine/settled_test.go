package engine

import (
	"strings"
	"testing"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/gateway/xdp"
)

// The configuration package may not import the data plane, so it states
// the XDP program's ports and the flow table's default limits itself:
// they must stay the data plane's.
func TestConfigAgreesWithDataPlane(t *testing.T) {
	if config.DefaultVXLANPort != xdp.PortVXLAN || config.DefaultGenevePort != xdp.PortGeneve {
		t.Errorf("config ports %d, %d; the XDP program steers %d, %d", config.DefaultVXLANPort, config.DefaultGenevePort, xdp.PortVXLAN, xdp.PortGeneve)
	}
	for _, n := range []int{1, 15, 1024, 4096, config.DefaultConntrackMax, 1 << 27} {
		p, e := config.DefaultFlowLimits(n)
		cp, ce := conntrack.DefaultLimits(n)
		if p != cp || e != ce {
			t.Errorf("DefaultFlowLimits(%d) = %d, %d; conntrack.DefaultLimits = %d, %d", n, p, e, cp, ce)
		}
	}
	if tunnelOf(config.TunnelVXLAN) != gateway.TunnelVXLAN || tunnelOf(config.TunnelGeneve) != gateway.TunnelGeneve {
		t.Error("tunnel types not carried over")
	}
}

// What Settle accepts, the pipeline accepts: the checks moved out of the
// engine with the configuration, and a reload must not meet new ones.
func TestSettledIsAPipelineConfig(t *testing.T) {
	c, err := config.ParseConfig([]byte(`
interfaces: [eth0]
vteps: [192.0.2.21, "fd00::21"]
innerMAC: 02:65:67:00:00:15
routerV4: 198.19.0.21
tunnel: geneve
vni: 7
deniedDestinations: [10.0.0.0/16]
allowedDestinations: [10.0.5.7/32]
nodes:
- {name: w1, vtep: 192.0.2.11, innerMAC: "02:65:67:00:00:0b", pods: [{addr: 198.18.1.2, policy: blue}, {addr: "fd00:1::2"}]}
- {name: w2, vtep: "fd00::12", innerMAC: "02:65:67:00:00:0c", pods: [{addr: 198.18.2.2, policy: blue}, {addr: 198.18.2.3, dest: "blue,green"}]}
destTables:
- {name: "blue,green", rules: [{prefix: 203.0.113.0/24, policy: green}, {prefix: 203.0.113.0/25, exclude: true}, {prefix: "2001:db8::/32", policy: blue}]}
policies:
- {name: blue, egressIPs: [192.0.2.101, "fd00::101"]}
- {name: green, egressIPs: []}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.Settle()
	if err != nil {
		t.Fatal(err)
	}
	g := gatewayConfig(set)
	g.Routes = route.NewStatic()
	if len(g.DestTables) != 1 || len(g.DestTables[0].Rules) != 3 || !g.DestTables[0].Rules[1].Exclude || g.Nodes[1].Pods[1].Dest != "blue,green" {
		t.Errorf("destination rules not carried over: %+v, pod %+v", g.DestTables, g.Nodes[1].Pods[1])
	}
	snap, err := gateway.NewSnapshot(g)
	if err != nil {
		t.Fatalf("settled configuration refused by the pipeline: %v", err)
	}
	for _, a := range set.Hosted {
		if !snap.Hosts(a) {
			t.Errorf("egress IP %v not hosted by the pipeline", a)
		}
	}
	// The checks the pipeline makes, Settle makes first, naming the key.
	for _, tc := range []struct{ field, yaml string }{
		{"nodes[1].vtep", "nodes:\n- {name: w1, vtep: 192.0.2.11, innerMAC: \"02:00:00:00:00:01\", pods: []}\n- {name: w2, vtep: 192.0.2.11, innerMAC: \"02:00:00:00:00:02\", pods: []}\n"},
		{"nodes[0].vtep", "nodes:\n- {name: w1, vtep: 224.0.0.1, innerMAC: \"02:00:00:00:00:01\", pods: []}\n"},
		{"nodes[0].pods[0].addr", "nodes:\n- {name: w1, vtep: 192.0.2.11, innerMAC: \"02:00:00:00:00:01\", pods: [{addr: 0.0.0.0}]}\n"},
	} {
		c, err := config.ParseConfig([]byte("interfaces: [eth0]\nvteps: [192.0.2.21]\ninnerMAC: 02:65:67:00:00:15\n" + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Settle(); err == nil || !strings.Contains(err.Error(), "config field "+tc.field+":") {
			t.Errorf("%s: got %v, want an error naming the field", tc.field, err)
		}
	}
}
