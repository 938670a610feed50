package engine

import (
	"bytes"
	"github.com/egret-gw/egret/gateway/config"
	"log/slog"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/vishvananda/netlink"
)

// TestWarnSharedTunnelPort: kernel VXLAN devices on the gateway's port (a
// CNI's, with another VNI; a co-located egret0, with the gateway's VNI) are
// named in a start-up warning; one on another port (flannel's 8472) is not.
func TestWarnSharedTunnelPort(t *testing.T) {
	ns := nstest.New(t)
	for _, d := range []struct {
		name string
		vni  int
		port int
	}{{"calicovx", 4096, 4789}, {"egret0", 100, 4789}, {"flannel1", 1, 8472}} {
		if err := ns.NL.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: d.name}, VxlanId: d.vni, Port: d.port}); err != nil {
			t.Fatalf("create VXLAN device %s: %v", d.name, err)
		}
	}
	ns.Enter(t)
	var buf bytes.Buffer
	e := &Engine{log: slog.New(slog.NewTextHandler(&buf, nil))}
	e.warnSharedTunnelPort(&config.Settled{Spec: config.Spec{Tunnel: config.TunnelVXLAN, VNI: 100}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	find := func(dev string) string {
		for _, l := range lines {
			if strings.Contains(l, "device="+dev+" ") {
				return l
			}
		}
		return ""
	}
	if l := find("calicovx"); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "another VNI") || !strings.Contains(l, "vni=4096") {
		t.Errorf("no warning that calicovx (VNI 4096) shares the port; log:\n%s", buf.String())
	}
	if l := find("egret0"); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "port and VNI") {
		t.Errorf("no warning that egret0 uses the gateway's VNI; log:\n%s", buf.String())
	}
	if l := find("flannel1"); l != "" {
		t.Errorf("warned about a device on another port: %s", l)
	}
	// Geneve: the same device list, looked at with the other type.
	buf.Reset()
	e.warnSharedTunnelPort(&config.Settled{Spec: config.Spec{Tunnel: config.TunnelGeneve, VNI: 100}})
	if buf.Len() != 0 {
		t.Errorf("warned about VXLAN devices for a Geneve gateway: %s", buf.String())
	}
}
