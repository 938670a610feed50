package cni

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/egret-gw/egret/internal/ec2test"
	"github.com/egret-gw/egret/internal/nstest"
)

// The fake cloud of the aws-elastic-ip tests: the node's ENI, a second
// instance's ENI, and two Elastic IPs.
const (
	eniNode  = "eni-0a1b2c3d4e5f60001"
	eniOther = "eni-0a1b2c3d4e5f60002"
	otherMAC = "0e:49:61:0f:c3:22" // eniOther's, on another instance
	eipFree  = "eipalloc-0a1b2c3d4e5f60001"
	eipTaken = "eipalloc-0a1b2c3d4e5f60002"
	eipPub   = "203.0.113.10"
	podPriv  = "192.0.2.99" // the pod's private address on the ENI's subnet (the lab's ext0 subnet)
)

// nodeMAC is the master's MAC address: eniNode's.
var nodeMAC, _ = net.ParseMAC(ec2test.IMDSMAC)

func startEC2(l net.Listener) *ec2test.Server {
	srv := ec2test.StartOn(l,
		ec2test.ENI{ID: eniNode, MAC: ec2test.IMDSMAC, Primary: "192.0.2.2"},
		ec2test.ENI{ID: eniOther, MAC: otherMAC, Primary: "192.0.2.3", IPv4: []string{"192.0.2.77"}},
	)
	srv.AddAddress(ec2test.Address{AllocationID: eipFree, PublicIP: eipPub})
	srv.AddAddress(ec2test.Address{AllocationID: eipTaken, PublicIP: "203.0.113.11", AssociationID: "eipassoc-0000000000000000a", ENI: eniOther, PrivateIP: "192.0.2.77"})
	return srv
}

// eipCloud runs the local EC2 server and AWS's metadata emulator (whose
// primary MAC is the node ENI's) and builds the plugin's EC2 client from the
// SDK's default chain, as the plugin does.
func eipCloud(t *testing.T) (*ec2EIP, *ec2test.Server) {
	t.Helper()
	srv := startEC2(nil)
	t.Cleanup(srv.Close)
	srv.Env(t, ec2test.StartIMDS(t, "eu-west-3", map[string]string{"mac-network-interface-id": eniNode}))
	e, err := newEC2EIP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e, srv
}

func TestEIPConfig(t *testing.T) {
	const base = `"name":"n","type":"egress-router","interfaceType":"aws-elastic-ip"`
	good := []string{
		`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `"},"ip":{"addresses":["10.0.1.50/24"]}}`,
		`{` + base + `,"interfaceArgs":{"master":"eth0","publicIp":"203.0.113.10","networkInterfaceId":"` + eniNode + `","mode":"L2"},"podIP":{"db-*":{"addresses":["10.0.1.50"]}}}`,
		`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `"},"ipConfig":{"name":"ips"}}`,
	}
	for _, s := range good {
		c, err := ParseConfig([]byte(s))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if c.EIP == nil || c.Mode != "l2" {
			t.Errorf("%s: EIP %+v mode %q", s, c.EIP, c.Mode)
		}
	}
	bad := []struct{ conf, field, words string }{
		{`{` + base + `,"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs", "allocationId (eipalloc-...) or publicIp"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `","publicIp":"203.0.113.10"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs", "not both"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"eip-123"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs.allocationId", "eipalloc-"},
		{`{` + base + `,"interfaceArgs":{"publicIp":"2001:db8::1"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs.publicIp", "IPv4"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `","networkInterfaceId":"eth0"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs.networkInterfaceId", "eni-"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `","mode":"l3"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs.mode", "ipvlan in l2 mode"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `"},"ip":{"addresses":["10.0.1.50/24","10.0.1.51/24"]}}`, "ip.addresses", "exactly one IPv4 address"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `"},"ip":{"addresses":["2001:db8::50/64"]}}`, "ip.addresses", "exactly one IPv4 address"},
		{`{` + base + `,"interfaceArgs":{"allocationId":"` + eipFree + `"},"podIP":{"a":{"addresses":["10.0.1.50/24"]},"b":{"addresses":["10.0.1.51/24","fd00::1/64"]}}}`, `podIP["b"].addresses`, "exactly one"},
		{`{"name":"n","type":"egress-router","interfaceArgs":{"allocationId":"` + eipFree + `"},"ip":{"addresses":["10.0.1.50/24"]}}`, "interfaceArgs", "belong to interfaceType aws-elastic-ip, not macvlan"},
	}
	for _, tc := range bad {
		_, err := ParseConfig([]byte(tc.conf))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v; want a %s error mentioning %q", tc.conf, err, tc.field, tc.words)
		}
	}
	if _, err := ParseHostConfig([]byte(`{"stateDir":"state"}`)); err == nil {
		t.Error("a relative stateDir was accepted")
	}
}

// TestEIPAttachCheckRelease runs the EC2 half of ADD, CHECK and DEL against
// the local EC2 server: the ENI found from the metadata service by MAC, the
// address assigned and the Elastic IP associated with it, both recorded;
// CHECK notices an association that changed; DEL undoes exactly that and is
// idempotent.
func TestEIPAttachCheckRelease(t *testing.T) {
	e, srv := eipCloud(t)
	ctx := context.Background()
	eni, err := e.interfaceOf(ctx, strings.ToUpper(ec2test.IMDSMAC))
	if err != nil || eni != eniNode {
		t.Fatalf("ENI of %s = %q, %v; want %s from the metadata service", ec2test.IMDSMAC, eni, err, eniNode)
	}
	if r := srv.SignedRegion(); r != "" {
		t.Fatalf("EC2 called before attach (region %q)", r)
	}
	dir := t.TempDir()
	p := &Plugin{Host: &HostConfig{StateDir: dir}}
	args := &skel.CmdArgs{ContainerID: "ctr1", IfName: "net1"}
	path, _ := eipRecordPath(dir, args.ContainerID, args.IfName)

	var u undo
	if err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eni, nodeMAC, addr(podPriv), path, &u); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if got := srv.ENI(eniNode).IPv4; !slices.Equal(got, []string{podPriv}) {
		t.Errorf("%s secondary addresses %v; want [%s]", eniNode, got, podPriv)
	}
	a := srv.Address(eipFree)
	if a.AssociationID == "" || a.ENI != eniNode || a.PrivateIP != podPriv {
		t.Errorf("Elastic IP after attach: %+v", a)
	}
	if r := srv.SignedRegion(); r != "eu-west-3" {
		t.Errorf("requests signed for %q; want eu-west-3, the metadata service's region", r)
	}
	rec, err := loadEIPRecord(path)
	if err != nil || rec == nil || rec.AssociationID != a.AssociationID || rec.ENI != eniNode || rec.PrivateIP != podPriv || rec.PublicIP != eipPub {
		t.Fatalf("record %+v, %v", rec, err)
	}
	if err := e.verify(ctx, rec); err != nil {
		t.Errorf("CHECK on a good attachment: %v", err)
	}
	// A second ADD of the same attachment is refused before any change.
	var u2 undo
	if err := e.attach(ctx, EIPArgs{PublicIP: addr(eipPub)}, eni, nodeMAC, addr(podPriv), path, &u2); err == nil || !strings.Contains(err.Error(), "does not take it over") {
		t.Errorf("attach of an associated Elastic IP: %v", err)
	}

	// Someone moves the Elastic IP: CHECK says so, DEL leaves theirs alone.
	srv.AddAddress(ec2test.Address{AllocationID: eipFree, PublicIP: eipPub, AssociationID: "eipassoc-0000000000000000b", ENI: eniOther, PrivateIP: "192.0.2.77"})
	if err := e.verify(ctx, rec); err == nil || !strings.Contains(err.Error(), "no longer associated") {
		t.Errorf("CHECK after the association moved: %v", err)
	}
	if err := p.releaseEIP(args); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if a := srv.Address(eipFree); a.AssociationID != "eipassoc-0000000000000000b" {
		t.Errorf("DEL disassociated an association it did not make: %+v", a)
	}
	if got := srv.ENI(eniNode).IPv4; len(got) != 0 {
		t.Errorf("DEL left %v on %s", got, eniNode)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("DEL left the record: %v", err)
	}
	n := len(srv.Calls())
	if err := p.releaseEIP(args); err != nil {
		t.Errorf("second DEL: %v", err)
	}
	if calls := srv.Calls()[n:]; len(calls) != 0 {
		t.Errorf("second DEL called EC2: %v", calls)
	}
	for _, c := range srv.Calls() {
		if !slices.Contains(eipActions, "ec2:"+c) {
			t.Errorf("the plugin called %s, which the documented IAM policy does not allow", c)
		}
	}
}

// TestEIPAttachRefusesAnotherENI: a networkInterfaceId that is not the
// master's (here another instance's ENI) is refused before EC2 changes.
func TestEIPAttachRefusesAnotherENI(t *testing.T) {
	e, srv := eipCloud(t)
	path := filepath.Join(t.TempDir(), "rec.json")
	var u undo
	err := e.attach(context.Background(), EIPArgs{AllocationID: eipFree}, eniOther, nodeMAC, addr(podPriv), path, &u)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "interfaceArgs.networkInterfaceId" {
		t.Fatalf("attach to another ENI: %v; want a refusal of interfaceArgs.networkInterfaceId", err)
	}
	if calls := srv.Calls(); !slices.Equal(calls, []string{"DescribeNetworkInterfaces"}) {
		t.Errorf("EC2 calls %v; want only the describe that found the ENI's MAC address", calls)
	}
	u.run()
	assertEIPClean(t, srv, path)
}

// TestEIPRollback injects failures after each EC2 change and checks the
// rollback leaves EC2 as it was.
func TestEIPRollback(t *testing.T) {
	e, srv := eipCloud(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rec.json")

	// AssociateAddress fails after the assignment: the address is unassigned.
	srv.Fail("AssociateAddress", "InvalidParameterValue", "injected", 1)
	var u undo
	err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u)
	if err == nil || !strings.Contains(err.Error(), "AssociateAddress answered InvalidParameterValue") {
		t.Fatalf("attach with a failing AssociateAddress: %v", err)
	}
	u.run()
	assertEIPClean(t, srv, path)
	if calls := srv.Calls(); !slices.Contains(calls, "UnassignPrivateIpAddresses") {
		t.Errorf("no unassign in the rollback: %v", calls)
	}

	// A step after the association fails (as link creation does): both undone.
	u = nil
	if err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u); err != nil {
		t.Fatal(err)
	}
	u.run()
	assertEIPClean(t, srv, path)

	// A rollback that cannot reach EC2 keeps the record for DEL.
	u = nil
	if err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u); err != nil {
		t.Fatal(err)
	}
	srv.Fail("DisassociateAddress", "InternalError", "injected", 10)
	srv.Fail("UnassignPrivateIpAddresses", "InternalError", "injected", 10)
	u.run()
	if rec, err := loadEIPRecord(path); rec == nil || err != nil {
		t.Fatalf("a failed rollback dropped the record (%v)", err)
	}
	srv.Fail("DisassociateAddress", "", "", 0)
	srv.Fail("UnassignPrivateIpAddresses", "", "", 0)
	rec, _ := loadEIPRecord(path)
	if err := e.release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	assertEIPClean(t, srv, path)

	// The ENI of another instance holds the address: EC2 refuses (no
	// reassignment), and nothing stays behind.
	u = nil
	err = e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr("192.0.2.77"), path, &u)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("attach of an address another ENI holds: %v", err)
	}
	u.run()
	if got := srv.ENI(eniOther).IPv4; !slices.Equal(got, []string{"192.0.2.77"}) {
		t.Errorf("the other ENI lost its address: %v", got)
	}
	assertEIPClean(t, srv, path)
}

func assertEIPClean(t *testing.T, srv *ec2test.Server, path string) {
	t.Helper()
	if got := srv.ENI(eniNode).IPv4; len(got) != 0 {
		t.Errorf("%s still has %v", eniNode, got)
	}
	if a := srv.Address(eipFree); a.AssociationID != "" {
		t.Errorf("Elastic IP still associated: %+v", a)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("record still there: %v", err)
	}
}

// TestEIPRefusals: what ADD must not take over is refused before any change.
func TestEIPRefusals(t *testing.T) {
	e, srv := eipCloud(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rec.json")
	cases := []struct {
		name  string
		a     EIPArgs
		ip    string
		words string
		field bool
	}{
		{"Elastic IP associated elsewhere", EIPArgs{AllocationID: eipTaken}, podPriv, "is associated with 192.0.2.77 on " + eniOther, true},
		{"the ENI's primary address", EIPArgs{AllocationID: eipFree}, "192.0.2.2", "primary address", true},
		{"no such Elastic IP", EIPArgs{AllocationID: "eipalloc-0a1b2c3d4e5f6ffff"}, podPriv, "InvalidAllocationID.NotFound", false},
		{"no such public IP", EIPArgs{PublicIP: addr("203.0.113.99")}, podPriv, "InvalidAddress.NotFound", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(srv.Calls())
			var u undo
			err := e.attach(ctx, tc.a, eniNode, nodeMAC, addr(tc.ip), path, &u)
			var fe *FieldError
			if err == nil || !strings.Contains(err.Error(), tc.words) || errors.As(err, &fe) != tc.field {
				t.Errorf("attach: %v; want an error mentioning %q (field error: %v)", err, tc.words, tc.field)
			}
			for _, c := range srv.Calls()[n:] {
				if !strings.HasPrefix(c, "Describe") {
					t.Errorf("refused attach called %s", c)
				}
			}
			u.run()
			assertEIPClean(t, srv, path)
		})
	}
	// An address the node's ENI holds already (an egress IP, another pod's).
	srv2 := ec2test.Start(ec2test.ENI{ID: eniNode, MAC: ec2test.IMDSMAC, Primary: "192.0.2.2", IPv4: []string{podPriv}})
	defer srv2.Close()
	t.Setenv("AWS_ENDPOINT_URL_EC2", srv2.URL)
	srv2.AddAddress(ec2test.Address{AllocationID: eipFree, PublicIP: eipPub})
	e2, err := newEC2EIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var u undo
	if err := e2.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u); err == nil || !strings.Contains(err.Error(), "secondary address of "+eniNode+" already") {
		t.Errorf("attach of an address the ENI holds: %v", err)
	}
	u.run()
	if got := srv2.ENI(eniNode).IPv4; !slices.Equal(got, []string{podPriv}) {
		t.Errorf("a refused attach changed the ENI: %v", got)
	}
}

// TestEIPThrottledAndUnreachable: throttling the SDK absorbs is invisible;
// past its retries, and with EC2 unreachable, the error is CNI's "try again
// later" and DEL says what it left behind, keeping the record for the next DEL.
func TestEIPThrottledAndUnreachable(t *testing.T) {
	e, srv := eipCloud(t)
	ctx := context.Background()
	dir := t.TempDir()
	p := &Plugin{Host: &HostConfig{StateDir: dir}}
	args := &skel.CmdArgs{ContainerID: "ctr2", IfName: "net1"}
	path, _ := eipRecordPath(dir, args.ContainerID, args.IfName)

	srv.Throttle(2)
	var u undo
	if err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u); err != nil {
		t.Fatalf("attach after 2 throttled answers: %v", err)
	}
	srv.Throttle(100)
	err := p.releaseEIP(args)
	if !errors.Is(err, errEC2Unavailable) || !strings.Contains(err.Error(), "RequestLimitExceeded") || !strings.Contains(err.Error(), "DEL again") {
		t.Errorf("DEL while throttled: %v", err)
	}
	if ce := cniErr(err, types.ErrInternal); cniCode(ce) != types.ErrTryAgainLater {
		t.Errorf("throttled DEL has CNI code %d; want %d", cniCode(ce), types.ErrTryAgainLater)
	}
	srv.Throttle(0)

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	t.Setenv("AWS_ENDPOINT_URL_EC2", "http://"+dead.Addr().String())
	err = p.releaseEIP(args)
	if !errors.Is(err, errEC2Unavailable) || !strings.Contains(err.Error(), "possibly left in EC2: Elastic IP "+eipPub) {
		t.Errorf("DEL with EC2 unreachable: %v", err)
	}
	if rec, _ := loadEIPRecord(path); rec == nil {
		t.Fatal("DEL with EC2 unreachable dropped the record")
	}
	t.Setenv("AWS_ENDPOINT_URL_EC2", srv.URL)
	if err := p.releaseEIP(args); err != nil {
		t.Fatalf("DEL once EC2 answers: %v", err)
	}
	assertEIPClean(t, srv, path)
}

// TestEIPReleaseAfterInterruptedAdd: a record without an association ID (ADD
// stopped between AssociateAddress and the record's update) releases the
// association that matches it, and only that one.
func TestEIPReleaseAfterInterruptedAdd(t *testing.T) {
	e, srv := eipCloud(t)
	ctx := context.Background()
	var u undo
	path := filepath.Join(t.TempDir(), "rec.json")
	if err := e.attach(ctx, EIPArgs{AllocationID: eipFree}, eniNode, nodeMAC, addr(podPriv), path, &u); err != nil {
		t.Fatal(err)
	}
	rec, _ := loadEIPRecord(path)
	rec.AssociationID = ""
	if err := e.release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	assertEIPClean(t, srv, path)
	// The other instance's association does not match the record: untouched.
	other := &eipRecord{AllocationID: eipTaken, ENI: eniNode, PrivateIP: podPriv}
	if err := e.release(ctx, other); err != nil {
		t.Fatal(err)
	}
	if a := srv.Address(eipTaken); a.ENI != eniOther {
		t.Errorf("release disassociated another instance's Elastic IP: %+v", a)
	}
}

// TestEIPAttachFindsENIByMAC runs ADD's EC2 half as the plugin does without
// networkInterfaceId: the ENI is the one the metadata service gives for the
// master's MAC address, read from the node's namespace.
func TestEIPAttachFindsENIByMAC(t *testing.T) {
	nstest.Root(t)
	_, srv := eipCloud(t)
	ext, _ := nstest.Pair(t, "ext0", prefix(nodeExt4+"/24"), "ext0p", prefix(outGW4+"/24"))
	link, err := ext.NS.NL.LinkByName("ext0")
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC(ec2test.IMDSMAC)
	if err := ext.NS.NL.LinkSetHardwareAddr(link, mac); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig([]byte(`{"name":"n","type":"egress-router","interfaceType":"aws-elastic-ip","interfaceArgs":{"master":"ext0","allocationId":"` + eipFree + `"},"ip":{"addresses":["` + podPriv + `/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	pl := &Plan{Master: HostLink{Name: "ext0"}, IP: *c.Static}
	hc := HostConfig{StateDir: t.TempDir(), AllowElasticIPs: []string{eipFree}}
	args := &skel.CmdArgs{ContainerID: "ctr3", IfName: "net1"}
	var u undo
	if err := attachEIP(ext.NS.NL, c, pl, args, hc, &u); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if a := srv.Address(eipFree); a.ENI != eniNode || a.PrivateIP != podPriv {
		t.Errorf("Elastic IP after attach: %+v; want it on %s, the ENI of %s", a, eniNode, ec2test.IMDSMAC)
	}
	if err := checkEIP(pl, args, hc); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	u.run()
	path, _ := eipRecordPath(hc.StateDir, args.ContainerID, args.IfName)
	assertEIPClean(t, srv, path)
}
