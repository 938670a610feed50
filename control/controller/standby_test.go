package controller_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// standbyBackend is a backend that can also read an EgressIP's recorded
// standbys (egret.io/standby).
type standbyBackend interface {
	backend
	// standby returns the raw egret.io/standby annotation ("" if none).
	standby(t *testing.T, name string) string
}

func (d *dirCluster) standby(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, cluster.StatusDir, name+".yaml"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var e egressv1.EgressIP
	if err := yaml.Unmarshal(b, &e); err != nil {
		t.Fatalf("status file of %s: %v", name, err)
	}
	return e.Annotations[egressv1.AnnotationStandby]
}

func (k *kubeCluster) standby(t *testing.T, name string) string {
	t.Helper()
	e, err := k.eip.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading EgressIP %s: %v", name, err)
	}
	return e.Annotations[egressv1.AnnotationStandby]
}

// standbysAre waits for the annotation of name to parse (v1.Standbys) to
// exactly want (IP → node); an empty want means no annotation.
func standbysAre(t *testing.T, c standbyBackend, name string, want map[string]string) func() (bool, string) {
	return func() (bool, string) {
		raw := c.standby(t, name)
		if len(want) == 0 {
			return raw == "", raw
		}
		m, err := egressv1.Standbys(&egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{egressv1.AnnotationStandby: raw}}})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for ip, n := range m {
			got[ip.String()] = n
		}
		return maps.Equal(got, want), raw
	}
}

// runStandby: the controller publishes a standby per assigned IP in the
// same write as the status, keeps it across unrelated changes, and a
// failed owner's IP lands on its standby even where balance would pick
// another node.
func runStandby(t *testing.T, c standbyBackend) *controller.Controller {
	for i, n := range []string{"egress-a", "egress-b", "egress-c"} {
		c.applyNode(t, egressNode(n, fmt.Sprintf("192.0.2.%d", 1+i), fmt.Sprintf("192.168.126.%d/24", 2+i), true))
	}
	off := 0
	// No hold-down: a node that returns is eligible at once (no timing).
	ctrl := c.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &off, HoldDown: &metav1.Duration{},
		LeaderElection: controller.LeaderElection{Disabled: true}})
	wait := 10 * time.Second

	// x: a (fewest IPs), standby b (no standbys yet, fewest IPs, first name).
	c.applyEgressIP(t, egressIP("x", "192.168.126.10"))
	nstest.Until(t, "x assigned", wait, statusIs(t, c, "x", map[string]string{"192.168.126.10": "egress-a"}))
	nstest.Until(t, "x's standby", wait, standbysAre(t, c, "x", map[string]string{"192.168.126.10": "egress-b"}))
	// y: b (fewest IPs, first name), standby c (no standby, fewer IPs than a).
	c.applyEgressIP(t, egressIP("y", "192.168.126.20"))
	nstest.Until(t, "y assigned", wait, statusIs(t, c, "y", map[string]string{"192.168.126.20": "egress-b"}))
	nstest.Until(t, "y's standby", wait, standbysAre(t, c, "y", map[string]string{"192.168.126.20": "egress-c"}))

	t.Run("stable across unrelated changes", func(t *testing.T) {
		// A new, empty node and a new object: z goes to c (no IP, first
		// name), its standby to d (no standby, no IP).
		c.applyNode(t, egressNode("egress-d", "192.0.2.4", "192.168.126.5/24", true))
		c.applyEgressIP(t, egressIP("z", "192.168.126.30"))
		nstest.Until(t, "z assigned", wait, statusIs(t, c, "z", map[string]string{"192.168.126.30": "egress-c"}))
		nstest.Until(t, "z's standby", wait, standbysAre(t, c, "z", map[string]string{"192.168.126.30": "egress-d"}))
		for name, want := range map[string]map[string]string{"x": {"192.168.126.10": "egress-b"}, "y": {"192.168.126.20": "egress-c"}} {
			if ok, raw := standbysAre(t, c, name, want)(); !ok {
				t.Errorf("%s's standby changed to %s after an unrelated object was added", name, raw)
			}
		}
	})

	t.Run("failover lands on the standby", func(t *testing.T) {
		// Balance alone would move x to egress-d, which hosts nothing; its
		// standby b holds x's flows and takes it.
		c.applyNode(t, egressNode("egress-a", "192.0.2.1", "192.168.126.2/24", false))
		nstest.Until(t, "x on its standby", wait, statusIs(t, c, "x", map[string]string{"192.168.126.10": "egress-b"}))
		// x's new standby: not b (owner), not a (NotReady); c and d stand
		// by for one IP each, d hosts none.
		nstest.Until(t, "x's new standby", wait, standbysAre(t, c, "x", map[string]string{"192.168.126.10": "egress-d"}))
		nstest.Until(t, "y and z unchanged", wait, func() (bool, string) {
			ok1, s1 := standbysAre(t, c, "y", map[string]string{"192.168.126.20": "egress-c"})()
			ok2, s2 := standbysAre(t, c, "z", map[string]string{"192.168.126.30": "egress-d"})()
			ok3, s3 := statusIs(t, c, "z", map[string]string{"192.168.126.30": "egress-c"})()
			return ok1 && ok2 && ok3, s1 + " " + s2 + " " + s3
		})
	})

	t.Run("no standby is said and counted", func(t *testing.T) {
		c.applyNode(t, egressNode("egress-d", "192.0.2.4", "192.168.126.5/24", false))
		c.applyNode(t, egressNode("egress-c", "192.0.2.3", "192.168.126.4/24", false))
		// Everything on b; no other node is eligible.
		for _, name := range []string{"x", "y", "z"} {
			nstest.Until(t, name+" without standby", wait, standbysAre(t, c, name, nil))
		}
		nstest.Until(t, "NoStandbyNode on x", wait, hasEvent(t, c, egressv1.Kind, "x", "NoStandbyNode", "has no standby"))
		nstest.Until(t, "gauge of IPs without standby", wait, func() (bool, string) {
			v, ok := gathered(t, registries[ctrl], "egret_controller_egress_ips_without_standby", "")
			return ok && v == 3, fmt.Sprint(v, ok)
		})
	})
	return ctrl
}

func TestStandbyFileSource(t *testing.T) {
	runStandby(t, &dirCluster{dir: t.TempDir()})
}

// TestStandbyKube runs the same on a real API server, then replaces a
// malformed annotation: it is treated as absent, never a crash.
func TestStandbyKube(t *testing.T) {
	_, cs, eip, user := startAPI(t)
	k := &kubeCluster{cs: cs, eip: eip, user: user}
	runStandby(t, k)
	k.applyNode(t, egressNode("egress-a", "192.0.2.1", "192.168.126.2/24", true))
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := eip.Get(ctx, "y", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[egressv1.AnnotationStandby] = "{not json"
		_, err = eip.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// y on b; a came back (no hold-down): its standby is a, the only other
	// eligible node (c and d are NotReady).
	nstest.Until(t, "malformed standby replaced", 10*time.Second, standbysAre(t, k, "y", map[string]string{"192.168.126.20": "egress-a"}))
	nstest.Until(t, "y's status kept", time.Second, statusIs(t, k, "y", map[string]string{"192.168.126.20": "egress-b"}))
}

// TestStandbyWrittenOnlyWhenChanged: a malformed annotation is replaced
// (never a crash), the standby goes in the status's update, and unrelated
// re-assignments write nothing.
func TestStandbyWrittenOnlyWhenChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := egressIP("x", "192.168.126.10")
		x.Annotations = map[string]string{egressv1.AnnotationStandby: `{"192.168.126.10":""}`}
		x.Status.Items = []egressv1.EgressIPStatusItem{{Node: "n1", EgressIP: "192.168.126.10"}}
		m := newMem(x)
		c := runMem(t, m)
		nstest.Until(t, "malformed standby replaced", 5*time.Second, func() (bool, string) {
			e, _ := m.EgressIP("x")
			return e.Annotations[egressv1.AnnotationStandby] == `{"192.168.126.10":"n2"}`, fmt.Sprint(e.Annotations, e.Status.Items)
		})
		if e, _ := m.EgressIP("x"); len(e.Status.Items) != 1 || e.Status.Items[0].Node != "n1" {
			t.Errorf("status %v, want x kept on n1", e.Status.Items)
		}
		n, _ := m.snapshot()
		if n != 1 {
			t.Errorf("%d updates to replace the standby annotation, want 1", n)
		}
		for range 5 {
			m.changed(cluster.KindNode)
		}
		nstest.Until(t, "re-assignments", 5*time.Second, func() (bool, string) {
			v, _ := gathered(t, registries[c], "egret_controller_assignment_duration_seconds", "")
			return v >= 3, fmt.Sprint(v)
		})
		settle()
		if again, _ := m.snapshot(); again != n {
			t.Errorf("%d updates after unrelated re-assignments, want none (was %d)", again-n, n)
		}
	})
}
