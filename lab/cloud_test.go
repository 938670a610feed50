package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/ec2test"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestManagedCloud runs the managed lab with the gateway nodes as AWS
// instances (docs/cloud.md): the real controller attaches every egress IP
// to its node's ENI through the EC2 API (the local EC2 server, reached
// from the controller's namespace) before the gateway there serves it;
// a failover moves the attachment with the IP; an attach the cloud
// refuses keeps the IP unclaimed and raises an Event.
func TestManagedCloud(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lab test; skipped with -short")
	}
	requireRoot(t)
	requireTools(t, "ip", "bridge", "nft", "ethtool", "sysctl")
	bin := egretBinary(t)
	spec, err := NewSpec(testLabName("c"), UnderlayIPv4)
	if err != nil {
		t.Fatal(err)
	}
	var enis []ec2test.ENI
	for _, g := range spec.Gateways {
		enis = append(enis, ec2test.ENI{ID: CloudENI(g.Name), Primary: g.IP.String()})
	}
	var srv *ec2test.Server
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": ec2test.AccessKey, "AWS_SECRET_ACCESS_KEY": ec2test.SecretKey, "AWS_REGION": "eu-central-1",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
	} {
		t.Setenv(k, v)
	}
	m := Managed{Binary: bin, Cloud: func(ns string) error {
		var l net.Listener
		if err := Do(ns, func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
			return err
		}
		srv = ec2test.StartOn(l, enis...)
		t.Cleanup(srv.Close)
		return os.Setenv("AWS_ENDPOINT_URL_EC2", srv.URL) // t.Setenv's cleanup (below) restores it
	}}
	t.Setenv("AWS_ENDPOINT_URL_EC2", "")
	l := &Lab{Spec: spec, Impl: m, Binary: bin}
	if err := l.Up(); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(l.RunDir(), "*.log"))
			for _, f := range logs {
				t.Logf("%s:\n%s", filepath.Base(f), tail(f))
			}
		}
		if err := Down("", spec.Name); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	objs := ObjectsDir(l.RunDir())

	// Every assigned IP is on its node's ENI, and nowhere else.
	attached := func(st *Status) {
		t.Helper()
		for _, a := range st.Assignment {
			for _, g := range spec.Gateways {
				has := slices.Contains(srv.ENI(CloudENI(g.Name)).IPv4, a.IP.String())
				if has != (a.Node == g.Name) {
					t.Errorf("%v is assigned to %q; ENI of %s holds it: %v", a.IP, a.Node, g.Name, has)
				}
			}
			if _, err := os.Stat(filepath.Join(objs, cluster.CloudIPDir, a.IP.String()+".yaml")); err != nil {
				t.Errorf("no CloudPrivateIPConfig for %v: %v", a.IP, err)
			}
		}
	}
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	checkAssignment(t, st)
	attached(st)
	checkClaims(t, l, st, "")
	t.Run("Sources", func(t *testing.T) { checkSources(t, l, st) })

	// Failover: the attachment moves with the IP.
	gw := killTarget(st)
	res, err := l.Failover(gw, 20*time.Second)
	if err != nil {
		t.Fatalf("failover of %s: %v", gw, err)
	}
	t.Logf("failover of %s (%s) with the EC2 attach: status after %.3f s, traffic after %.3f s", gw, movedString(res.Moved), res.StatusSeconds, res.TrafficSeconds)
	st, _ = l.Status()
	checkAssignment(t, st)
	attached(st)
	checkClaims(t, l, st, gw)
	t.Run("SourcesAfterFailover", func(t *testing.T) { checkSources(t, l, st) })

	// The cloud refuses: the new IP is never claimed, and an Event says why.
	srv.Fail("AssignPrivateIpAddresses", "PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.", 1_000_000)
	manifest := "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {name: refused}\nspec:\n  egressIPs: [192.0.2.120]\n  namespaceSelector: {matchLabels: {env: none}}\n"
	if err := os.WriteFile(filepath.Join(objs, "refused.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	nstest.UntilEvery(t, "a CloudAttachFailed Event for the refused IP in events.log", 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		return hasEventLine(t, objs, "refused", "CloudAttachFailed"), ""
	})
	// Several attach attempts, each refused.
	attempts := func() int { return countCalls(srv.Calls(), "AssignPrivateIpAddresses") }
	n := attempts()
	nstest.UntilEvery(t, "more attach attempts after the first refusal", 30*time.Second, 100*time.Millisecond, func() (bool, string) { return attempts() >= n+2, "" })
	st, _ = l.Status()
	for _, a := range st.Assignment {
		if a.IP.String() == "192.0.2.120" && a.Node != "" {
			t.Errorf("192.0.2.120 is assigned to %s although the cloud refused it", a.Node)
		}
	}
	checkClaims(t, l, st, gw) // no gateway holds 192.0.2.120
	for _, g := range spec.Gateways {
		if slices.Contains(srv.ENI(CloudENI(g.Name)).IPv4, "192.0.2.120") {
			t.Errorf("ENI of %s holds the refused IP", g.Name)
		}
	}
}

// hasEventLine reports whether the file source's events.log has an Event
// with reason about object name.
func hasEventLine(t *testing.T, objs, name, reason string) bool {
	f, err := os.Open(filepath.Join(objs, cluster.EventsFile))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct{ Kind, Name, Reason, Message string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Name == name && e.Reason == reason {
			t.Logf("event: %s", strings.TrimSpace(fmt.Sprint(e)))
			return true
		}
	}
	return false
}
