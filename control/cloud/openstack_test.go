package cloud

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// openStackPair builds the provider against the local Keystone and
// Neutron, through gophercloud's environment credentials as production
// does, with two servers' ports on one network (IPv4 and IPv6 subnets).
func openStackPair(t *testing.T) (*OpenStack, *fakeOpenStack) {
	t.Helper()
	f := startOpenStack(t)
	f.AddSubnet("sub-4", "net-a", "10.0.0.0/24")
	f.AddSubnet("sub-6", "net-a", "2001:db8::/64")
	f.AddNode("srv-1", "port-1", "net-a", "sub-4", "10.0.0.11")
	f.AddNode("srv-2", "port-2", "net-a", "sub-4", "10.0.0.12")
	f.Env(t)
	o, err := NewOpenStack(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return o, f
}

var (
	osNode1 = NIC{ID: "port-1", Instance: "openstack:///srv-1"}
	osNode2 = NIC{ID: "port-2", Instance: "openstack:///srv-2"}
)

func TestOpenStackAttachMoveDetach(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.50")

	if err := o.Attach(ctx, osNode1, ip, NIC{}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	res := f.Reservation("10.0.0.50")
	if res == nil || res.DeviceOwner != OpenStackDeviceOwner || res.NetworkID != "net-a" ||
		len(res.FixedIPs) != 1 || res.FixedIPs[0].IPAddress != "10.0.0.50" || res.FixedIPs[0].SubnetID != "sub-4" {
		t.Fatalf("reservation port = %+v; want egressip-10.0.0.50 on net-a/sub-4 owned by %s", res, OpenStackDeviceOwner)
	}
	if got := f.Pairs("port-1"); !slices.Equal(got, []string{"10.0.0.50"}) {
		t.Fatalf("port-1 allows %v; want [10.0.0.50]", got)
	}
	// Attached already: only reads.
	n := len(f.Calls())
	if err := o.Attach(ctx, osNode1, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Calls()[n:] {
		if !strings.HasPrefix(c, "GET ") {
			t.Errorf("second Attach wrote: %v", f.Calls()[n:])
			break
		}
	}
	// Failover: the pair moves, old port first; the reservation stays.
	n = len(f.Calls())
	if err := o.Attach(ctx, osNode2, ip, osNode1); err != nil {
		t.Fatalf("move: %v", err)
	}
	calls := f.Calls()[n:]
	var writes []string
	for _, c := range calls {
		if !strings.HasPrefix(c, "GET ") {
			writes = append(writes, c)
		}
	}
	if !slices.Equal(writes, []string{"PUT /ports/port-1", "PUT /ports/port-2"}) {
		t.Errorf("the move wrote %v; want port-1's pairs, then port-2's (never two ports allowed at once), no port created or deleted", writes)
	}
	if a, b := f.Pairs("port-1"), f.Pairs("port-2"); len(a) != 0 || !slices.Equal(b, []string{"10.0.0.50"}) {
		t.Fatalf("after the move port-1 allows %v, port-2 %v", a, b)
	}
	if r := f.Reservation("10.0.0.50"); r == nil || r.ID != res.ID {
		t.Fatalf("reservation after the move = %+v; want the same port %s", r, res.ID)
	}
	if err := o.Detach(ctx, osNode2, ip); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if b := f.Pairs("port-2"); len(b) != 0 || f.Reservation("10.0.0.50") != nil {
		t.Fatalf("after Detach port-2 allows %v, reservation %+v", b, f.Reservation("10.0.0.50"))
	}
	if err := o.Detach(ctx, osNode2, ip); err != nil {
		t.Fatalf("Detach of a detached address: %v", err)
	}
}

func TestOpenStackIPv6(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("2001:db8::50")
	if err := o.Attach(ctx, osNode1, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	if err := o.Attach(ctx, osNode2, ip, osNode1); err != nil {
		t.Fatal(err)
	}
	r := f.Reservation("2001:db8::50")
	if r == nil || r.FixedIPs[0].SubnetID != "sub-6" {
		t.Fatalf("reservation %+v; want one on sub-6", r)
	}
	if a, b := f.Pairs("port-1"), f.Pairs("port-2"); len(a) != 0 || !slices.Equal(b, []string{"2001:db8::50"}) {
		t.Fatalf("port-1 allows %v, port-2 %v", a, b)
	}
}

// TestOpenStackFloatingIPFollows: the specification's flow deletes and
// recreates the reservation port on a move, which disassociates the
// admin's floating IP (Neutron does that to a deleted port's floating
// IPs), and so refuses to move while one is associated. Egret's move
// keeps the port: the floating IP stays associated with the egress IP,
// now reached through the new node.
func TestOpenStackFloatingIPFollows(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.60")
	if err := o.Attach(ctx, osNode1, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	res := f.Reservation("10.0.0.60")
	f.AssociateFIP("203.0.113.7", res.ID)

	if err := o.Attach(ctx, osNode2, ip, osNode1); err != nil {
		t.Fatalf("move with a floating IP: %v", err)
	}
	if got := f.FIPPort("203.0.113.7"); got != res.ID {
		t.Fatalf("floating IP on port %q after the move; want the reservation port %s", got, res.ID)
	}
	if b := f.Pairs("port-2"); !slices.Equal(b, []string{"10.0.0.60"}) {
		t.Fatalf("port-2 allows %v", b)
	}
	// And back, as a second failover would.
	if err := o.Attach(ctx, osNode1, ip, osNode2); err != nil || f.FIPPort("203.0.113.7") != res.ID {
		t.Fatalf("move back: %v, floating IP on %q", err, f.FIPPort("203.0.113.7"))
	}
	// Removing the egress IP keeps the reservation port and its floating
	// IP (nothing to redo for the admin when it comes back); only the
	// pair goes.
	if err := o.Detach(ctx, osNode1, ip); err != nil {
		t.Fatal(err)
	}
	if a := f.Pairs("port-1"); len(a) != 0 || f.Reservation("10.0.0.60") == nil || f.FIPPort("203.0.113.7") != res.ID {
		t.Fatalf("after Detach port-1 allows %v, reservation %+v, floating IP on %q", a, f.Reservation("10.0.0.60"), f.FIPPort("203.0.113.7"))
	}
	n := len(f.Calls())
	if err := o.Attach(ctx, osNode2, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(f.Calls()[n:], "POST /ports") {
		t.Error("re-adding the egress IP created a new reservation port; want the kept one reused")
	}
}

// TestOpenStackOtherNetwork: the same CIDR on another network; a
// reservation there moves with the egress IP unless a floating IP holds it.
func TestOpenStackOtherNetwork(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	f.AddSubnet("sub-b", "net-b", "10.0.0.0/24")
	f.AddNode("srv-3", "port-3", "net-b", "sub-b", "10.0.0.13")
	node3 := NIC{ID: "port-3", Instance: "openstack://RegionOne/srv-3"}
	ip := netip.MustParseAddr("10.0.0.70")
	if err := o.Attach(ctx, node3, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	if err := o.Attach(ctx, osNode1, ip, node3); err != nil {
		t.Fatal(err)
	}
	if r := f.Reservation("10.0.0.70"); r == nil || r.NetworkID != "net-a" {
		t.Fatalf("reservation %+v; want it recreated on net-a", r)
	}
	f.AssociateFIP("203.0.113.8", f.Reservation("10.0.0.70").ID)
	err := o.Attach(ctx, node3, ip, osNode1)
	if err == nil || !strings.Contains(err.Error(), "203.0.113.8") {
		t.Fatalf("move to another network with a floating IP = %v; want an error naming it", err)
	}
	if a := f.Pairs("port-1"); !slices.Equal(a, []string{"10.0.0.70"}) || f.FIPPort("203.0.113.8") == "" {
		t.Fatalf("a refused move changed state: port-1 allows %v, floating IP on %q", a, f.FIPPort("203.0.113.8"))
	}
}

func TestOpenStackRefusals(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	// Another port's address.
	err := o.Attach(ctx, osNode1, netip.MustParseAddr("10.0.0.12"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "IpAddressAlreadyAllocated" || !strings.Contains(err.Error(), "port-2") {
		t.Fatalf("Attach of port-2's address = %v; want IpAddressAlreadyAllocated naming port-2", err)
	}
	// Outside every subnet of the network.
	err = o.Attach(ctx, osNode1, netip.MustParseAddr("192.168.9.9"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "InvalidIpForNetwork" {
		t.Fatalf("Attach outside the subnets = %v; want InvalidIpForNetwork", err)
	}
	// A node's annotation naming another server's port.
	if err := o.Attach(ctx, NIC{ID: "port-2", Instance: "openstack:///srv-1"}, netip.MustParseAddr("10.0.0.51"), NIC{}); err == nil || !strings.Contains(err.Error(), "srv-2") {
		t.Fatalf("Attach to another server's port = %v", err)
	}
	if err := o.Attach(ctx, NIC{ID: "port-1", Instance: "aws:///x"}, netip.MustParseAddr("10.0.0.51"), NIC{}); err == nil || !strings.Contains(err.Error(), "providerID") {
		t.Fatalf("Attach with a foreign providerID = %v", err)
	}
	err = o.Attach(ctx, NIC{ID: "port-gone", Instance: "openstack:///srv-1"}, netip.MustParseAddr("10.0.0.51"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "PortNotFound" {
		t.Fatalf("Attach to a missing port = %v; want PortNotFound", err)
	}
	for _, p := range []string{"port-1", "port-2"} {
		if got := f.Pairs(p); len(got) != 0 {
			t.Errorf("%s allows %v after refused attaches", p, got)
		}
	}
	// Quota: no reservation, no pair.
	f.SetQuota(2)
	err = o.Attach(ctx, osNode1, netip.MustParseAddr("10.0.0.52"), NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "OverQuota" {
		t.Fatalf("Attach over the port quota = %v; want OverQuota", err)
	}
	if f.Reservation("10.0.0.52") != nil || len(f.Pairs("port-1")) != 0 {
		t.Fatal("an attach over quota left state behind")
	}
}

func TestOpenStackPairsLimitAndOthers(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	// Pairs Egret did not add (a VIP, a CIDR) are kept.
	f.AddNode("srv-4", "port-4", "net-a", "sub-4", "10.0.0.14", "10.0.0.200", "10.0.0.128/28")
	n4 := NIC{ID: "port-4", Instance: "openstack:///srv-4"}
	ip := netip.MustParseAddr("10.0.0.53")
	if err := o.Attach(ctx, n4, ip, NIC{}); err != nil {
		t.Fatal(err)
	}
	if err := o.Detach(ctx, n4, ip); err != nil {
		t.Fatal(err)
	}
	if got := f.Pairs("port-4"); !slices.Equal(got, []string{"10.0.0.200", "10.0.0.128/28"}) {
		t.Fatalf("port-4 allows %v; want its own pairs kept", got)
	}
	// max_allowed_address_pairs reached.
	full := []string{}
	for i := range 10 {
		full = append(full, netip.AddrFrom4([4]byte{10, 0, 0, byte(100 + i)}).String())
	}
	f.AddNode("srv-5", "port-5", "net-a", "sub-4", "10.0.0.15", full...)
	err := o.Attach(ctx, NIC{ID: "port-5", Instance: "openstack:///srv-5"}, ip, NIC{})
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "AllowedAddressPairExhausted" {
		t.Fatalf("Attach to a full port = %v; want AllowedAddressPairExhausted", err)
	}
	if got := f.Pairs("port-5"); !slices.Equal(got, full) {
		t.Fatalf("a refused attach changed port-5's pairs to %v", got)
	}
}

func TestOpenStackConflictsAndOutages(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.54")
	// Another writer changed the port between read and write: read again.
	f.Fail("PUT /ports/port-1", 412, "RevisionNumberConstraintFailed")
	if err := o.Attach(ctx, osNode1, ip, NIC{}); err != nil {
		t.Fatalf("Attach after one stale revision: %v", err)
	}
	// Always stale: reported, nothing lost.
	for range openstackAttempts {
		f.Fail("PUT /ports/port-2", 412, "RevisionNumberConstraintFailed")
	}
	err := o.Attach(ctx, osNode2, ip, osNode1)
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "RevisionNumberConstraintFailed" {
		t.Fatalf("move with always-stale revisions = %v; want RevisionNumberConstraintFailed", err)
	}
	// The controller retries the same move: it completes.
	if err := o.Attach(ctx, osNode2, ip, osNode1); err != nil {
		t.Fatalf("retried move: %v", err)
	}
	if a, b := f.Pairs("port-1"), f.Pairs("port-2"); len(a) != 0 || !slices.Equal(b, []string{"10.0.0.54"}) {
		t.Fatalf("after the retry port-1 allows %v, port-2 %v", a, b)
	}
	// Neutron unavailable in the middle of a move: the error says so, the
	// reservation and its floating IP stay, the retry finishes the move.
	res := f.Reservation("10.0.0.54")
	f.AssociateFIP("203.0.113.9", res.ID)
	f.Fail("PUT /ports/port-1", 503, "ServiceUnavailable")
	err = o.Attach(ctx, osNode1, ip, osNode2)
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "ServiceUnavailable" {
		t.Fatalf("move during an outage = %v; want ServiceUnavailable", err)
	}
	if err := o.Attach(ctx, osNode1, ip, osNode2); err != nil {
		t.Fatalf("move after the outage: %v", err)
	}
	if a := f.Pairs("port-1"); !slices.Equal(a, []string{"10.0.0.54"}) || f.FIPPort("203.0.113.9") != res.ID {
		t.Fatalf("after the outage port-1 allows %v, floating IP on %q", a, f.FIPPort("203.0.113.9"))
	}
	// Throttled: gophercloud waits Retry-After and retries.
	f.Fail("GET /ports/port-2", 429, "OverLimit")
	f.Fail("GET /ports/port-2", 429, "OverLimit")
	if err := o.Attach(ctx, osNode2, ip, osNode1); err != nil {
		t.Fatalf("move after two throttled answers: %v", err)
	}
	for range openstackThrottleRetries + 1 {
		f.Fail("GET /ports/port-1", 429, "OverLimit")
	}
	err = o.Attach(ctx, osNode1, ip, osNode2)
	if ae, ok := errors.AsType[*APIError](err); !ok || ae.Code != "OverLimit" {
		t.Fatalf("move while throttled = %v; want OverLimit", err)
	}
	// The token expired: gophercloud authenticates again.
	issued := f.Issued()
	f.ExpireTokens()
	if err := o.Attach(ctx, osNode1, ip, osNode2); err != nil {
		t.Fatalf("Attach with an expired token: %v", err)
	}
	if f.Issued() != issued+1 {
		t.Errorf("Keystone issued %d tokens; want one more than %d", f.Issued(), issued)
	}
	// Neutron gone altogether: a clear error, the pairs as they were.
	f.srv.Close()
	err = o.Attach(ctx, osNode2, ip, osNode1)
	if err == nil || !strings.Contains(err.Error(), "GET port") {
		t.Fatalf("Attach with Neutron down = %v; want an error naming the call", err)
	}
}

func TestOpenStackCredentials(t *testing.T) {
	f := startOpenStack(t)
	f.AddSubnet("sub-4", "net-a", "10.0.0.0/24")
	f.AddNode("srv-1", "port-1", "net-a", "sub-4", "10.0.0.11")
	f.Env(t)
	t.Setenv("OS_PASSWORD", "wrong")
	if _, err := NewOpenStack(context.Background()); err == nil || !strings.Contains(err.Error(), "Keystone") {
		t.Fatalf("NewOpenStack with a wrong password = %v; want an authentication error", err)
	}
	// clouds.yaml with an application credential, as docs/cloud.md shows.
	dir := t.TempDir()
	yaml := "clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: " + f.AuthURL() +
		"\n      application_credential_id: " + fakeAppCredID + "\n      application_credential_secret: " + fakeAppCredSecret +
		"\n    region_name: RegionOne\n"
	if err := os.WriteFile(filepath.Join(dir, "clouds.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME"} {
		t.Setenv(k, "")
	}
	t.Setenv("OS_CLIENT_CONFIG_FILE", filepath.Join(dir, "clouds.yaml"))
	o, err := NewOpenStack(context.Background())
	if err != nil {
		t.Fatalf("NewOpenStack from clouds.yaml: %v", err)
	}
	if err := o.Attach(context.Background(), osNode1, netip.MustParseAddr("10.0.0.55"), NIC{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OS_CLOUD", "other")
	if _, err := NewOpenStack(context.Background()); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("NewOpenStack with a cloud clouds.yaml lacks = %v", err)
	}
}

func TestOpenStackNodeConfig(t *testing.T) {
	o, f := openStackPair(t)
	ctx := context.Background()
	// srv-6: a storage port first, then the machine network's, dual stack.
	f.AddSubnet("sub-st", "net-st", "172.16.0.0/24")
	f.AddNode("srv-6", "port-6s", "net-st", "sub-st", "172.16.0.6")
	f.AddNode("srv-6", "port-6", "net-a", "sub-4", "10.0.0.16", "10.0.0.80", "10.0.0.200", "10.0.0.128/28")
	f.mu.Lock()
	f.port("port-6").FixedIPs = append(f.port("port-6").FixedIPs, fakeFixedIP{SubnetID: "sub-6", IPAddress: "2001:db8::16"})
	f.mu.Unlock()
	egress := func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.80") }
	c, err := o.NodeConfig(ctx, "openstack:///srv-6", []netip.Addr{netip.MustParseAddr("10.0.0.16")}, egress)
	if err != nil {
		t.Fatal(err)
	}
	if c.Interface != "port-6" || c.IfAddr.IPv4 != netip.MustParsePrefix("10.0.0.0/24") || c.IfAddr.IPv6 != netip.MustParsePrefix("2001:db8::/64") {
		t.Errorf("config %+v; want port-6 with 10.0.0.0/24 and 2001:db8::/64", c)
	}
	// 10 minus the VIP and the CIDR; the egress IP is the controller's to count.
	if !c.Capacity.Total || c.Capacity.IP != 8 {
		t.Errorf("capacity %+v; want {ip: 8}", c.Capacity)
	}
	if _, err := o.NodeConfig(ctx, "openstack:///srv-none", nil, egress); err == nil {
		t.Error("NodeConfig of a server without ports succeeded")
	}
	if _, err := o.NodeConfig(ctx, "", nil, egress); err == nil {
		t.Error("NodeConfig without a providerID succeeded")
	}
}
