package cni

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/internal/ec2test"
	"github.com/egret-gw/egret/internal/nstest"
)

// eipLab is the lab with the local EC2 server listening inside the node's
// namespace, where the plugin runs, and the environment pointing the SDK's
// default chain at it. The region comes from AWS_REGION and the ENI from
// the configuration: AWS's metadata emulator cannot listen in the node's
// namespace (TestEIPAttachCheckRelease covers the metadata path).
type eipLab struct {
	*lab
	srv   *ec2test.Server
	dir   string // the plugin directory, with its node-side settings
	state string // the settings' stateDir
}

func newEIPLab(t *testing.T) *eipLab {
	t.Helper()
	nstest.Root(t)
	l := newLab(t, true)
	// The master is eniNode's interface: its MAC address is that ENI's.
	ext0, err := l.Node.NL.LinkByName("ext0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Node.NL.LinkSetHardwareAddr(ext0, nodeMAC); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := l.Node.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := startEC2(ln)
	t.Cleanup(srv.Close)
	srv.Env(t, "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	state := t.TempDir()
	return &eipLab{lab: l, srv: srv, state: state, dir: pluginDirWith(t, `{"allowMasterTypes":["veth"],"allowElasticIPs":["`+eipFree+`","`+eipTaken+`","`+eipPub+`"],"stateDir":`+quote(state)+`,"networkNamespaces":{"*":["*"]}}`)}
}

func (e *eipLab) run(t *testing.T, cmd, conf string) (types.Error, error) {
	t.Helper()
	out, err := runPluginFrom(t, e.lab, e.dir, e.Pod.Path(), cmd, conf, "")
	var ce types.Error
	if err != nil {
		ce = cniError(t, out)
	}
	return ce, err
}

// records lists the Elastic IP records in the state directory.
func (e *eipLab) records(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(e.state, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// assertUntouched: EC2 as startEC2 made it, no record, no net1.
func (e *eipLab) assertUntouched(t *testing.T) {
	t.Helper()
	if got := e.srv.ENI(eniNode).IPv4; len(got) != 0 {
		t.Errorf("%s still has %v", eniNode, got)
	}
	if a := e.srv.Address(eipFree); a.AssociationID != "" {
		t.Errorf("Elastic IP still associated: %+v", a)
	}
	if a := e.srv.Address(eipTaken); a.ENI != eniOther || a.PrivateIP != "192.0.2.77" {
		t.Errorf("the other instance's Elastic IP changed: %+v", a)
	}
	if got := e.srv.ENI(eniOther).IPv4; !slices.Equal(got, []string{"192.0.2.77"}) {
		t.Errorf("the other ENI changed: %v", got)
	}
	if r := e.records(t); len(r) != 0 {
		t.Errorf("records left: %v", r)
	}
	if _, err := e.Pod.NL.LinkByName("net1"); err == nil {
		t.Error("net1 left in the pod")
	}
}

func eipConf(version, args, ip string) string {
	return `{"cniVersion":"` + version + `","name":"eip","type":"egress-router","interfaceType":"aws-elastic-ip","interfaceArgs":{` + args + `},"ip":{"addresses":[` + ip + `]}}`
}

var eipArgs = `"master":"ext0","allocationId":"` + eipFree + `","networkInterfaceId":"` + eniNode + `"`

// TestEIPCnitool runs ADD → CHECK → DEL through the reference runtime tool
// and the plugin binary, against the local EC2 server. Where the kernel
// cannot make ipvlan devices, ADD must do its EC2 half, fail creating the
// link with code 50 and roll the EC2 half back; the test checks that in the
// server, then skips the data path with the reason.
func TestEIPCnitool(t *testing.T) {
	e := newEIPLab(t)
	bin := cnitoolPath(t)
	c := &cnitool{t: t, lab: e.lab, bin: bin, confDir: t.TempDir(), dir: e.dir}
	c.writeConf("egrt-eip", "1.1.0", `"interfaceType":"aws-elastic-ip","interfaceArgs":{`+eipArgs+`},"ip":{"addresses":["`+podPriv+`/24"]}`)
	before := routesOf(t, e.Pod, netlink.FAMILY_V4)
	probe := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: "ipvprobe", ParentIndex: mustIndex(t, e.Node, "ext0")}, Mode: netlink.IPVLAN_MODE_L2}
	kernelErr := e.Node.NL.LinkAdd(probe)
	if kernelErr == nil {
		_ = e.Node.NL.LinkDel(probe)
	}

	out, err := c.run("add", "egrt-eip")
	if kernelErr != nil {
		if err == nil || !strings.Contains(err.Error(), ErrNoIPvlan.Error()) {
			t.Errorf("ADD on a kernel without ipvlan: %v; want %q", err, ErrNoIPvlan)
		}
		// cnitool prints only the message: the code, from the binary itself.
		if ce, err := e.run(t, "ADD", eipConf("1.1.0", eipArgs, `"`+podPriv+`/24"`)); err == nil || ce.Code != types.ErrPluginNotAvailable {
			t.Errorf("ADD on a kernel without ipvlan: %v %+v; want code 50", err, ce)
		}
		calls := e.srv.Calls()
		for _, want := range []string{"AssignPrivateIpAddresses", "AssociateAddress", "DisassociateAddress", "UnassignPrivateIpAddresses"} {
			if !slices.Contains(calls, want) {
				t.Errorf("EC2 calls %v lack %s: the link failure came before the EC2 half, or its rollback", calls, want)
			}
		}
		e.assertUntouched(t)
		if got := routesOf(t, e.Pod, netlink.FAMILY_V4); strings.Join(got, "|") != strings.Join(before, "|") {
			t.Errorf("a failed ADD changed the routes:%s", joinLines(got))
		}
		n := len(e.srv.Calls())
		if _, err := c.run("del", "egrt-eip"); err != nil {
			t.Errorf("DEL after the failed ADD: %v", err)
		}
		if calls := e.srv.Calls()[n:]; len(calls) != 0 {
			t.Errorf("DEL without a record called EC2: %v", calls)
		}
		t.Skipf("kernel cannot create ipvlan devices (%v): the aws-elastic-ip link (ADD → CHECK → DEL with net1) not exercised; its EC2 half and rollback were", kernelErr)
	}
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if !strings.Contains(out, podPriv+"/24") {
		t.Errorf("result lacks %s: %s", podPriv, out)
	}
	if got := e.srv.ENI(eniNode).IPv4; !slices.Equal(got, []string{podPriv}) {
		t.Errorf("%s has %v after ADD", eniNode, got)
	}
	if a := e.srv.Address(eipFree); a.ENI != eniNode || a.PrivateIP != podPriv {
		t.Errorf("Elastic IP after ADD: %+v", a)
	}
	link, lerr := e.Pod.NL.LinkByName("net1")
	if lerr != nil || link.Type() != "ipvlan" {
		t.Fatalf("net1: %v %v", link, lerr)
	}
	if !hasRoute(routesOf(t, e.Pod, netlink.FAMILY_V4), "default via "+outGW4+" dev net1") {
		t.Errorf("default route not via net1:%s", joinLines(routesOf(t, e.Pod, netlink.FAMILY_V4)))
	}
	if _, err := c.run("check", "egrt-eip"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	// Someone else takes the Elastic IP: CHECK says so.
	a := e.srv.Address(eipFree)
	e.srv.AddAddress(ec2test.Address{AllocationID: eipFree, PublicIP: eipPub})
	if _, err := c.run("check", "egrt-eip"); err == nil || !strings.Contains(err.Error(), "no longer associated") {
		t.Errorf("CHECK with the Elastic IP disassociated: %v", err)
	}
	e.srv.AddAddress(a)
	if _, err := c.run("del", "egrt-eip"); err != nil {
		t.Fatal(err)
	}
	assertClean(t, e.lab, before)
	e.assertUntouched(t)
	n := len(e.srv.Calls())
	if _, err := c.run("del", "egrt-eip"); err != nil {
		t.Errorf("second DEL: %v", err)
	}
	if calls := e.srv.Calls()[n:]; len(calls) != 0 {
		t.Errorf("second DEL called EC2: %v", calls)
	}
}

// TestEIPPluginErrors runs the binary with configurations and EC2 answers
// ADD must refuse or roll back, and DEL with EC2 unreachable.
func TestEIPPluginErrors(t *testing.T) {
	e := newEIPLab(t)
	good := eipConf("1.0.0", eipArgs, `"`+podPriv+`/24"`)
	cases := []struct {
		name, conf string
		inject     func()
		code       uint
		words      string
		describe   bool // EC2 may be read, never changed
	}{
		{"no Elastic IP", eipConf("1.0.0", `"master":"ext0"`, `"`+podPriv+`/24"`), nil, types.ErrInvalidNetworkConfig, "allocationId (eipalloc-...) or publicIp", false},
		{"two addresses", eipConf("1.0.0", eipArgs, `"`+podPriv+`/24","192.0.2.98/24"`), nil, types.ErrInvalidNetworkConfig, "exactly one IPv4 address", false},
		{"macvlan mode", eipConf("1.0.0", eipArgs+`,"mode":"bridge"`, `"`+podPriv+`/24"`), nil, types.ErrInvalidNetworkConfig, "ipvlan in l2 mode", false},
		{"the node's address", eipConf("1.0.0", eipArgs, `"`+nodeExt4+`/24"`), nil, types.ErrInvalidNetworkConfig, "an address of the node", false},
		{"missing master", eipConf("1.0.0", `"master":"nope0","allocationId":"`+eipFree+`","networkInterfaceId":"`+eniNode+`"`, `"`+podPriv+`/24"`), nil, types.ErrInvalidNetworkConfig, "interfaceArgs.master", false},
		{"Elastic IP not allowed on the node", eipConf("1.0.0", `"master":"ext0","allocationId":"eipalloc-0a1b2c3d4e5f6ffff","networkInterfaceId":"`+eniNode+`"`, `"`+podPriv+`/24"`), nil, types.ErrInvalidNetworkConfig, "allowElasticIPs", false},
		{"Elastic IP taken", eipConf("1.0.0", `"master":"ext0","allocationId":"`+eipTaken+`","networkInterfaceId":"`+eniNode+`"`, `"`+podPriv+`/24"`), nil, types.ErrInvalidNetworkConfig, "does not take it over", true},
		{"address of another ENI", eipConf("1.0.0", eipArgs, `"192.0.2.77/24"`), nil, types.ErrInternal, "AssignPrivateIpAddresses answered InvalidParameterValue", true},
		{"AssociateAddress fails", good, func() {
			e.srv.Fail("AssociateAddress", "UnauthorizedOperation", "You are not authorized to perform this operation.", 1)
		}, types.ErrInternal, "AssociateAddress answered UnauthorizedOperation", true},
		{"throttled past the SDK's retries", good, func() { e.srv.Throttle(100) }, types.ErrTryAgainLater, "RequestLimitExceeded", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(e.srv.Calls())
			if tc.inject != nil {
				tc.inject()
			}
			ce, err := e.run(t, "ADD", tc.conf)
			e.srv.Throttle(0)
			if err == nil {
				t.Fatal("ADD succeeded")
			}
			if ce.Code != tc.code || !strings.Contains(ce.Msg, tc.words) {
				t.Errorf("code %d %q; want %d mentioning %q", ce.Code, ce.Msg, tc.code, tc.words)
			}
			calls := e.srv.Calls()[n:]
			if !tc.describe && len(calls) != 0 {
				t.Errorf("a configuration refused before EC2 called it: %v", calls)
			}
			if slices.Contains(calls, "AssignPrivateIpAddresses") && tc.name == "AssociateAddress fails" && !slices.Contains(calls, "UnassignPrivateIpAddresses") {
				t.Errorf("no rollback of the assignment: %v", calls)
			}
			e.assertUntouched(t)
		})
	}

	// STATUS: the node's list, then the SDK's region.
	if ce, err := e.run(t, "STATUS", eipConf("1.1.0", `"allocationId":"eipalloc-0a1b2c3d4e5f6ffff"`, `"`+podPriv+`/24"`)); err == nil || ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "allowElasticIPs") {
		t.Errorf("STATUS for an Elastic IP the node does not allow: %v %+v", err, ce)
	}
	if ce, err := e.run(t, "STATUS", eipConf("1.1.0", eipArgs, `"`+podPriv+`/24"`)); err != nil {
		t.Errorf("STATUS: %+v", ce)
	}
	t.Setenv("AWS_REGION", "")
	if ce, err := e.run(t, "STATUS", eipConf("1.1.0", eipArgs, `"`+podPriv+`/24"`)); err == nil || ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "region") {
		t.Errorf("STATUS without a region: %v %+v", err, ce)
	}
	t.Setenv("AWS_REGION", "eu-west-3")

	// An ADD whose rollback cannot reach EC2 (on a kernel without ipvlan the
	// link fails; elsewhere the ADD succeeds): the record stays, and DEL
	// finishes the job once EC2 answers, saying what it left while it does not.
	e.srv.Fail("DisassociateAddress", "InternalError", "injected", 1)
	e.srv.Fail("UnassignPrivateIpAddresses", "InternalError", "injected", 1)
	_, addErr := e.run(t, "ADD", good)
	e.srv.Fail("DisassociateAddress", "", "", 0)
	e.srv.Fail("UnassignPrivateIpAddresses", "", "", 0)
	if r := e.records(t); len(r) != 1 {
		t.Fatalf("records after ADD (%v): %v; want one", addErr, r)
	}
	if a := e.srv.Address(eipFree); a.ENI != eniNode {
		t.Fatalf("Elastic IP not associated after ADD (%v): %+v", addErr, a)
	}
	t.Setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:1") // nothing listens there in the node's namespace
	ce, err := e.run(t, "DEL", good)
	if err == nil || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "possibly left in EC2: Elastic IP "+eipPub) || !strings.Contains(ce.Msg, "DEL again") {
		t.Errorf("DEL with EC2 unreachable: %v %+v; want code 11 saying what is left", err, ce)
	}
	if _, err := e.Pod.NL.LinkByName("net1"); err == nil {
		t.Error("DEL with EC2 unreachable left net1")
	}
	if len(e.records(t)) != 1 {
		t.Error("DEL with EC2 unreachable dropped the record")
	}
	t.Setenv("AWS_ENDPOINT_URL_EC2", e.srv.URL)
	e.srv.Throttle(2) // absorbed by the SDK's retries
	if ce, err := e.run(t, "DEL", good); err != nil {
		t.Fatalf("DEL once EC2 answers: %+v", ce)
	}
	e.assertUntouched(t)
	// A DEL whose configuration no longer parses still finds the record (none now).
	if ce, err := e.run(t, "DEL", `{"cniVersion":"1.0.0","name":"eip","type":"egress-router","interfaceType":"aws-elastic-ip"}`); err != nil {
		t.Errorf("DEL with a broken configuration: %+v", ce)
	}
	if err := os.WriteFile(filepath.Join(e.state, "aws-elastic-ip-ctr1-net1.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ce, err := e.run(t, "DEL", good); err == nil || !strings.Contains(ce.Msg, "damaged") {
		t.Errorf("DEL with a damaged record: %v %+v", err, ce)
	}
}
