package lab

import (
	"strings"
	"testing"
)

// TestIPv6Spec checks the IPv6-only lab: every member has IPv6 addresses
// only (and no dual-stack field is set), the pods' MTU leaves room for
// VXLAN over IPv6, the static modes SNAT with ip6 rules and answer
// neighbour discovery for egress IPs, the gateway config names IPv6 VTEPs
// and an IPv6 router address, and Validate refuses mixing families.
func TestIPv6Spec(t *testing.T) {
	s, err := NewSpec("egl", UnderlayIPv6)
	if err != nil {
		t.Fatal(err)
	}
	if !s.IPv6Only() || s.Underlay() != UnderlayIPv6 || s.PodMTU() != 1500-70 {
		t.Fatalf("IPv6Only %v, underlay %s, pod MTU %d; want true, ipv6, 1430", s.IPv6Only(), s.Underlay(), s.PodMTU())
	}
	if d, _ := NewSpec("egl", ""); d.IPv6Only() || d.PodMTU() != 1500-50 {
		t.Errorf("the default lab is IPv6-only or has pod MTU %d, want 1450", d.PodMTU())
	}
	if _, err := NewSpec("egl", "ipx"); err == nil {
		t.Error("NewSpec accepted underlay ipx")
	}
	addrs := []string{s.Router.IP.String(), s.Router.OutIP.String(), s.Server.IP.String(), s.Controller.IP.String()}
	for _, w := range s.Workers {
		addrs = append(addrs, w.IP.String(), w.TunnelIP.String())
		for _, p := range w.Pods {
			addrs = append(addrs, p.IP.String())
			if p.IP6.IsValid() {
				t.Errorf("pod %s has a second address %v", p.Name, p.IP6)
			}
		}
	}
	for _, g := range s.Gateways {
		addrs = append(addrs, g.IP.String(), g.TunnelIP.String())
	}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "2001:db8:") {
			t.Errorf("address %s is not an IPv6 documentation address", a)
		}
	}
	r := kernelRules(s, "g1")
	for _, want := range []string{"table ip6 egret_lab", "ip6 saddr 2001:db8:18:1::2 snat to 2001:db8:2::101",
		"icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept", "ip6 daddr { 2001:db8:2::101 } ct state new,invalid drop"} {
		if !strings.Contains(r, want) {
			t.Errorf("g1 rules lack %q:\n%s", want, r)
		}
	}
	c := NewGatewayConfig(s, "g1")
	if c.VTEPs[0] != "2001:db8:2::21" || c.RouterV4 != "" || c.RouterV6 != "2001:db8:19::21" || c.Nodes[0].VTEP != "2001:db8:2::11" {
		t.Errorf("gateway config %+v: want IPv6 VTEPs and routerV6 only", c)
	}
	if _, err := c.Settle(); err != nil {
		t.Errorf("the IPv6 gateway config does not pass the gateway's validation: %v", err)
	}
	for what, brk := range map[string]func(s *Spec){
		"IPv6 field set": func(s *Spec) { s.Server.IP6 = s.Workers[0].Pods[0].IP.Next() },
		"IPv4 tunnel":    func(s *Spec) { d, _ := DefaultSpec("egl"); s.TunnelSubnet = d.TunnelSubnet },
		"IPv4 pod":       func(s *Spec) { s.Workers[0].Pods[0].IP = mustAddr("198.18.1.2") },
		"second address": func(s *Spec) { s.Workers[0].Pods[0].IP6 = mustAddr("2001:db8:18:1::9") },
	} {
		s, _ := IPv6Spec("egl")
		brk(s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", what)
		}
	}
}

// TestObjectsIPv6 checks the objects of the IPv6-only managed lab: IPv6
// node addresses, VTEPs and pod IPs, and the EgressIP manifests of
// deploy/examples/lab/ipv6 (valid, IPv6 egress IPs, selecting the pods the
// spec says).
func TestObjectsIPv6(t *testing.T) {
	s, err := IPv6Spec("egl")
	if err != nil {
		t.Fatal(err)
	}
	dir, b := writtenObjects(t, s)
	for _, want := range []string{`k8s.ovn.org/node-primary-ifaddr: '{"ipv6":"2001:db8:2::21/64"}'`, "egret.io/vtep: 2001:db8:2::23",
		"address: 2001:db8:2::12", "- 2001:db8:18:1::/64"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("nodes.yaml lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "192.0.2.") {
		t.Errorf("nodes.yaml of the IPv6-only lab has IPv4 addresses:\n%s", b)
	}
	eips, err := EgressIPs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(eips) != 2 || eips[0].Name != "blue" || eips[1].Name != "green" {
		t.Fatalf("EgressIPs %+v, want blue and green", eips)
	}
	for _, e := range eips {
		for _, ip := range e.Spec.EgressIPs {
			if !strings.HasPrefix(ip, "2001:db8:2::") {
				t.Errorf("EgressIP %s has %s, want IPv6 egress IPs in the fabric", e.Name, ip)
			}
		}
	}
	checkSelection(t, s, dir)
}
