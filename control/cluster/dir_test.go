package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const manifests = `apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata:
  name: egress-group1
spec:
  egressIPs: [192.168.126.11, 192.168.126.102]
  namespaceSelector:
    matchLabels: {env: prod}
---
---
apiVersion: v1
kind: Node
metadata:
  name: node1
  labels: {k8s.ovn.org/egress-assignable: ""}
---
apiVersion: v1
kind: Namespace
metadata: {name: prod, labels: {env: prod}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
status: {podIPs: [{ip: 10.128.0.5}]}
`

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

type kinds struct {
	mu   sync.Mutex
	seen []Kind
}

func (k *kinds) add(x Kind) { k.mu.Lock(); k.seen = append(k.seen, x); k.mu.Unlock() }
func (k *kinds) take() []Kind {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.seen
	k.seen = nil
	return s
}

func start(t *testing.T, dir string) (*Dir, *kinds) {
	t.Helper()
	s, err := NewDir(dir, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k := &kinds{}
	if err := s.Start(ctx, k.add); err != nil {
		t.Fatal(err)
	}
	return s, k
}

func TestLoadAllKinds(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	write(t, dir, "notes.txt", "not a manifest")
	s, _ := start(t, dir)
	if len(s.View().EgressIPs) != 1 || len(s.View().Nodes) != 1 || len(s.View().Namespaces) != 1 || len(s.View().Pods) != 1 {
		t.Fatalf("loaded %d eips %d nodes %d namespaces %d pods", len(s.View().EgressIPs), len(s.View().Nodes), len(s.View().Namespaces), len(s.View().Pods))
	}
	if p := s.View().Pods[0]; p.Namespace != "default" {
		t.Errorf("pod namespace %q, want default", p.Namespace)
	}
	n := s.View().Nodes[0]
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady || n.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("node without conditions: %+v, want Ready", n.Status.Conditions)
	}
	e := s.View().EgressIPs[0]
	if e.CreationTimestamp.IsZero() || e.UID == "" || e.ResourceVersion == "" {
		t.Errorf("EgressIP metadata not filled: %+v", e.ObjectMeta)
	}
	if s.Errors.Load() != 0 {
		t.Errorf("%d errors on valid manifests", s.Errors.Load())
	}
}

func TestBadInputIsCountedNotFatal(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a-good.yaml", manifests)
	for name, body := range map[string]string{
		"b-syntax.yaml":    "apiVersion: v1\nkind: Node\nmetadata: {name: [unclosed\n",
		"c-kind.yaml":      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
		"d-noname.yaml":    "apiVersion: v1\nkind: Node\nmetadata: {}\n",
		"e-dup.yaml":       "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\n",
		"f-typo.yaml":      "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {name: typo}\nspec: {egressIP: [1.2.3.4]}\n",
		"g-scalar.yaml":    "42\n",
		"h-badtype.yaml":   "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 7}\n",
		"i-badip.yaml":     "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {name: badip}\nspec: {egressIPs: [300.1.1.1], namespaceSelector: {}}\n",
		"j-eipt-typo.yaml": "apiVersion: k8s.ovn.org/v1\nkind: EgressIPTraffic\nmetadata: {name: t}\nspec: {destinationNetwork: [192.0.2.0/24]}\n",
		"k-eipt-dup.yaml":  "apiVersion: k8s.ovn.org/v1\nkind: EgressIPTraffic\nmetadata: {name: u}\nspec: {dnsNames: [a.example]}\n---\napiVersion: k8s.ovn.org/v1\nkind: EgressIPTraffic\nmetadata: {name: u}\nspec: {dnsNames: [b.example]}\n",
	} {
		write(t, dir, name, body)
	}
	s, _ := start(t, dir)
	if got := s.Errors.Load(); got != 9 {
		t.Errorf("Errors = %d, want 9 (every bad document but the bad IP, which the controller reports)", got)
	}
	if v := s.View().Traffic; len(v) != 1 || v[0].Name != "u" || v[0].Spec.DNSNames[0] != "a.example" {
		t.Errorf("EgressIPTraffic %v, want only the first u", v)
	}
	var names []string
	for _, e := range s.View().EgressIPs {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"badip", "egress-group1"}) || len(s.View().Nodes) != 1 {
		t.Errorf("EgressIPs %v, %d nodes", names, len(s.View().Nodes))
	}
}

func TestStatusConflictsAndRestart(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	s, k := start(t, dir)
	k.take()
	cur, _ := s.EgressIP("egress-group1")
	up := cur.DeepCopy()
	up.Status.Items = []egressv1.EgressIPStatusItem{{Node: "node1", EgressIP: "192.168.126.11"}}
	if err := s.UpdateEgressIP(context.Background(), up); err != nil {
		t.Fatal(err)
	}
	if got := k.take(); !slices.Equal(got, []Kind{KindEgressIP}) {
		t.Errorf("changes after a status write: %v", got)
	}
	if err := s.UpdateEgressIP(context.Background(), up); !apierrors.IsConflict(err) {
		t.Errorf("second write with the old resourceVersion: %v, want a conflict", err)
	}
	gone := up.DeepCopy()
	gone.Name = "nope"
	if err := s.UpdateEgressIP(context.Background(), gone); !apierrors.IsNotFound(err) {
		t.Errorf("write of an unknown object: %v, want not found", err)
	}
	if cur.Status.Items != nil {
		t.Error("the status write changed the object handed out before")
	}

	// A new source on the same directory (a restarted controller) sees the status.
	s2, _ := start(t, dir)
	e, _ := s2.EgressIP("egress-group1")
	if len(e.Status.Items) != 1 || e.Status.Items[0].Node != "node1" {
		t.Errorf("status after restart: %+v", e.Status)
	}

	// An edit of the spec keeps the status; deleting the object removes its status file.
	write(t, dir, "all.yaml", strings.Replace(manifests, "192.168.126.102", "192.168.126.103", 1))
	s2.Reload()
	e, _ = s2.EgressIP("egress-group1")
	if len(e.Status.Items) != 1 || e.Spec.EgressIPs[1] != "192.168.126.103" {
		t.Errorf("after a spec edit: %+v", e)
	}
	os.Remove(filepath.Join(dir, "all.yaml"))
	s2.Reload()
	if len(s2.View().EgressIPs) != 0 {
		t.Error("EgressIP still there after its file was removed")
	}
	if _, err := os.Stat(filepath.Join(dir, StatusDir, "egress-group1.yaml")); !os.IsNotExist(err) {
		t.Errorf("status file of a deleted object: %v", err)
	}
}

func TestEventsFile(t *testing.T) {
	dir := t.TempDir()
	s, _ := start(t, dir)
	s.Event(&corev1.ObjectReference{Kind: "EgressIP", Name: "g"}, corev1.EventTypeWarning, "InvalidEgressIP", "bad \"ip\"\nline")
	evs, err := readEvents(filepath.Join(dir, EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Reason != "InvalidEgressIP" || evs[0].Message != "bad \"ip\"\nline" || evs[0].Name != "g" {
		t.Errorf("events %+v", evs)
	}
}

func TestNewRefusesMissingDir(t *testing.T) {
	if _, err := NewDir(filepath.Join(t.TempDir(), "missing"), 0, nil); err == nil {
		t.Error("a missing directory was accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	write(t, filepath.Dir(f), "file", "")
	if _, err := NewDir(f, 0, nil); err == nil {
		t.Error("a file was accepted as the directory")
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(manifests))
	f.Add([]byte("---\n- a\n- b\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"x"},"status":{"conditions":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		write(t, dir, "x.yaml", string(b))
		s, err := NewDir(dir, 0, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		s.Reload()
		for _, e := range s.View().EgressIPs {
			if e.Name == "" {
				t.Fatal("an EgressIP without a name was loaded")
			}
		}
	})
}

// readEvents parses an events.log.
func readEvents(path string) ([]eventRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []eventRecord
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e eventLine
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, eventRecord(e))
	}
	return out, nil
}

// eventRecord is one Event read back from events.log.
type eventRecord struct {
	Time    time.Time
	Type    string
	Kind    string
	Name    string
	Reason  string
	Message string
}

// TestDirCloudIPs: the file source keeps CloudPrivateIPConfig objects as
// files, read back as written; IPv6 names use dots.
func TestDirCloudIPs(t *testing.T) {
	dir := t.TempDir()
	d, err := NewDir(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if l, err := d.ListCloudIPs(ctx); err != nil || len(l) != 0 {
		t.Fatalf("empty directory: %v, %v", l, err)
	}
	v4 := CloudIP{IP: netip.MustParseAddr("10.0.1.50"), SpecNode: "g1", StatusNode: "g1",
		Conditions: []metav1.Condition{{Type: ConditionAssigned, Status: metav1.ConditionTrue, Reason: ReasonCloudResponseSuccess, Message: "attached", LastTransitionTime: metav1.Unix(1700000000, 0).Rfc3339Copy()}}}
	v6 := CloudIP{IP: netip.MustParseAddr("2600:1f18::50"), SpecNode: "g2"}
	for _, c := range []CloudIP{v4, v6} {
		if err := d.StoreCloudIP(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, CloudIPDir, "2600.1f18.0000.0000.0000.0000.0000.0050.yaml")); err != nil {
		t.Fatalf("IPv6 object file: %v", err)
	}
	l, err := d.ListCloudIPs(ctx)
	if err != nil || len(l) != 2 || !l[0].Attached("g1") || l[0].IP != v4.IP || l[1].IP != v6.IP || l[1].SpecNode != "g2" || l[1].Attached("g2") {
		t.Fatalf("read back %+v, %v", l, err)
	}
	if err := d.DeleteCloudIP(ctx, v4.IP); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteCloudIP(ctx, v4.IP); err != nil {
		t.Fatalf("deleting a deleted object: %v", err)
	}
	os.WriteFile(filepath.Join(dir, CloudIPDir, "junk.yaml"), []byte("spec: {node: x}\n"), 0o644)
	if l, err := d.ListCloudIPs(ctx); err == nil || len(l) != 1 {
		t.Fatalf("a file not named after an IP: %v, %v; want the good object and an error", l, err)
	}
}

// TestAnnotationChangeSeen: an edit of an EgressIP manifest that changes
// only an annotation is a change of the object (readers see the new
// annotations); the status the controller wrote stays.
func TestAnnotationChangeSeen(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "objects.yaml", manifests)
	s, k := start(t, dir)
	k.take()
	write(t, dir, "objects.yaml", strings.Replace(manifests, "  name: egress-group1\n",
		"  name: egress-group1\n  annotations: {example.com/owner: team-a}\n", 1))
	s.Reload()
	if got := k.take(); !slices.Contains(got, KindEgressIP) {
		t.Fatalf("changed kinds %v after an annotation edit, want EgressIP", got)
	}
	e, ok := s.EgressIP("egress-group1")
	if !ok || e.Annotations["example.com/owner"] != "team-a" {
		t.Fatalf("EgressIP %v after the edit, want the annotation example.com/owner: team-a", e)
	}
}

// A file that was good keeps its last good version while a document of it
// is bad (a typo, a half-written save): its objects vanishing would read
// as their deletion. Fixed, the new version counts; removed, its objects go.
func TestBadFileKeepsLastGoodVersion(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	s, k := start(t, dir)
	eip := func() *egressv1.EgressIP {
		for _, e := range s.View().EgressIPs {
			if e.Name == "egress-group1" {
				return e
			}
		}
		return nil
	}
	if eip() == nil || len(s.View().Pods) != 1 {
		t.Fatalf("loaded %d eips %d pods", len(s.View().EgressIPs), len(s.View().Pods))
	}
	k.take()
	// The list item's indentation left behind: namespaceSelector moves
	// under the list and the document no longer parses.
	broken := strings.Replace(manifests, "  egressIPs: [192.168.126.11, 192.168.126.102]\n  namespaceSelector:", "  egressIPs:\n  - 192.168.126.11\n    namespaceSelector:", 1)
	if broken == manifests {
		t.Fatal("the test's manifest changed: nothing to break")
	}
	write(t, dir, "all.yaml", broken)
	before := s.Errors.Load()
	s.Reload()
	if s.Errors.Load() == before {
		t.Fatal("the broken document was not counted")
	}
	if e := eip(); e == nil || !slices.Equal(e.Spec.EgressIPs, []string{"192.168.126.11", "192.168.126.102"}) || len(s.View().Pods) != 1 {
		t.Fatalf("after a bad save: EgressIP %+v, %d pods; want the last good version", e, len(s.View().Pods))
	}
	if got := k.take(); len(got) != 0 {
		t.Errorf("kinds changed %v, want none: nothing in force changed", got)
	}
	// Fixed: the new version is in force.
	write(t, dir, "all.yaml", strings.Replace(manifests, "192.168.126.102", "192.168.126.103", 1))
	s.Reload()
	if e := eip(); e == nil || !slices.Equal(e.Spec.EgressIPs, []string{"192.168.126.11", "192.168.126.103"}) {
		t.Fatalf("after the fix: EgressIP %+v", e)
	}
	// A file that never was good loads what it can, as before.
	write(t, dir, "new.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: dev}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: [unclosed\n")
	s.Reload()
	if len(s.View().Namespaces) != 2 {
		t.Errorf("%d namespaces, want the new file's good one too", len(s.View().Namespaces))
	}
	// Removed: its objects go, bad or not.
	write(t, dir, "all.yaml", broken)
	s.Reload()
	os.Remove(filepath.Join(dir, "all.yaml"))
	s.Reload()
	if eip() != nil || len(s.View().Pods) != 0 {
		t.Errorf("after removing the file: %d eips, %d pods; want none", len(s.View().EgressIPs), len(s.View().Pods))
	}
}

const trafficManifests = `apiVersion: k8s.ovn.org/v1
kind: EgressIPTraffic
metadata: {name: db, labels: {traffic: db}}
spec:
  destinationNetworks: [192.0.2.0/24]
  dnsNames: [db.example.com]
---
apiVersion: k8s.ovn.org/v1
kind: EgressIPTraffic
metadata: {name: a-partly-bad, annotations: {egret.io/exclude: "true"}}
spec:
  destinationNetworks: [198.51.100.0/24, 203.0.113.1/24]
`

// The file source reads EgressIPTraffic objects beside the EgressIPs,
// keeps their status in status/egressiptraffics/, and reports changes of
// them as KindTraffic.
func TestDirTraffic(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	write(t, dir, "traffic.yaml", trafficManifests)
	var logs bytes.Buffer
	s, err := NewDir(dir, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &kinds{}
	if err := s.Start(ctx, k.add); err != nil {
		t.Fatal(err)
	}
	v := s.View()
	if len(v.Traffic) != 2 || v.Traffic[0].Name != "a-partly-bad" || v.Traffic[1].Name != "db" || len(v.EgressIPs) != 1 {
		t.Fatalf("View: %d EgressIPs, EgressIPTraffic %v", len(v.EgressIPs), v.Traffic)
	}
	db := v.Traffic[1]
	if db.UID == "" || db.ResourceVersion == "" || db.Labels["traffic"] != "db" || !v.Traffic[0].Excluded() {
		t.Errorf("db metadata %+v, a-partly-bad excluded %v", db.ObjectMeta, v.Traffic[0].Excluded())
	}
	// A problem is logged with its field, and the object still used (the
	// plan leaves the bad entry out), as the controller would see it.
	if !strings.Contains(logs.String(), "spec.destinationNetworks[1]") || !strings.Contains(logs.String(), "has host bits set") {
		t.Errorf("the unmasked network was not reported; log:\n%s", logs.String())
	}
	if s.Errors.Load() != 0 {
		t.Errorf("Errors = %d for decodable objects", s.Errors.Load())
	}

	// Status: only status is taken, with the API server's conflict and
	// not-found errors.
	mine := db.DeepCopy()
	mine.Status.DNSNames = []egressv1.ResolvedName{{Name: "db.example.com", Addresses: []string{"192.0.2.7"}}}
	mine.Spec.DestinationNetworks = nil
	mine.Labels = nil
	k.take()
	if err := s.UpdateTrafficStatus(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if got := k.take(); !slices.Equal(got, []Kind{KindTraffic}) {
		t.Errorf("changes after a status write: %v, want [EgressIPTraffic]", got)
	}
	after := s.View().Traffic[1]
	if len(after.Status.DNSNames) != 1 || after.Status.DNSNames[0].Addresses[0] != "192.0.2.7" ||
		len(after.Spec.DestinationNetworks) != 1 || after.Labels["traffic"] != "db" || after.ResourceVersion == db.ResourceVersion {
		t.Errorf("after UpdateTrafficStatus: %+v", after)
	}
	if db.Status.DNSNames != nil || mine.Status.DNSNames[0].Addresses[0] != "192.0.2.7" {
		t.Error("the status write changed an object handed out before")
	}
	if err := s.UpdateTrafficStatus(ctx, mine); !apierrors.IsConflict(err) {
		t.Errorf("second write with the old resourceVersion: %v, want a conflict", err)
	}
	gone := after.DeepCopy()
	gone.Name = "nope"
	if err := s.UpdateTrafficStatus(ctx, gone); !apierrors.IsNotFound(err) {
		t.Errorf("write of an unknown object: %v, want not found", err)
	}
	statusFile := filepath.Join(dir, StatusDir, TrafficStatusDir, "db.yaml")
	if _, err := os.Stat(statusFile); err != nil {
		t.Fatalf("no status file: %v", err)
	}
	// The EgressIP status files are read as before, the folder beside them ignored.
	if st, err := s.Check(ctx); err != nil || len(st) != 0 {
		t.Errorf("Check with an EgressIPTraffic status folder: %v, %v", st, err)
	}

	// A restarted controller reads the status back; a spec edit keeps it.
	s2, k2 := start(t, dir)
	if got := s2.View().Traffic[1]; len(got.Status.DNSNames) != 1 || got.Status.DNSNames[0].Addresses[0] != "192.0.2.7" {
		t.Errorf("status after a restart: %+v", got.Status)
	}
	k2.take()
	write(t, dir, "traffic.yaml", strings.Replace(trafficManifests, "192.0.2.0/24", "192.0.2.0/25", 1))
	s2.Reload()
	if got := s2.View().Traffic[1]; len(got.Status.DNSNames) != 1 || got.Spec.DestinationNetworks[0] != "192.0.2.0/25" {
		t.Errorf("after a spec edit: %+v", got)
	}
	if got := k2.take(); !slices.Equal(got, []Kind{KindTraffic}) {
		t.Errorf("changes after editing an EgressIPTraffic: %v, want [EgressIPTraffic]", got)
	}
	// Removing the object removes its status file.
	os.Remove(filepath.Join(dir, "traffic.yaml"))
	s2.Reload()
	if got := s2.View().Traffic; len(got) != 0 {
		t.Errorf("EgressIPTraffic %v after its file was removed", got)
	}
	if _, err := os.Stat(statusFile); !os.IsNotExist(err) {
		t.Errorf("status file of a deleted object: %v", err)
	}
}

// A reader (steer and gateway agents) follows the EgressIPTraffic status
// files the controller writes, and writes none itself.
func TestDirReaderFollowsTrafficStatus(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "traffic.yaml", trafficManifests)
	ro, err := NewDirReader(dir, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &kinds{}
	if err := ro.Start(ctx, k.add); err != nil {
		t.Fatal(err)
	}
	addrs := func() []string {
		v := ro.View()
		if len(v.Traffic) != 2 {
			t.Fatalf("%d EgressIPTraffic, want 2", len(v.Traffic))
		}
		if len(v.Traffic[1].Status.DNSNames) == 0 {
			return nil
		}
		return v.Traffic[1].Status.DNSNames[0].Addresses
	}
	if got := addrs(); got != nil {
		t.Errorf("addresses %v before any status file", got)
	}
	if err := ro.UpdateTrafficStatus(ctx, ro.View().Traffic[1]); !errors.Is(err, ErrReadOnly) {
		t.Errorf("a reader's UpdateTrafficStatus: %v, want ErrReadOnly", err)
	}

	ctl, err := NewDir(dir, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(ctx, func(Kind) {}); err != nil {
		t.Fatal(err)
	}
	db := ctl.View().Traffic[1].DeepCopy()
	db.Status.DNSNames = []egressv1.ResolvedName{{Name: "db.example.com", Addresses: []string{"192.0.2.8", "2001:db8::8"}}}
	if err := ctl.UpdateTrafficStatus(ctx, db); err != nil {
		t.Fatal(err)
	}
	k.take()
	ro.readTrafficStatus() // what the reader's poll does
	if got := addrs(); !slices.Equal(got, []string{"192.0.2.8", "2001:db8::8"}) {
		t.Errorf("reader's addresses %v, want the controller's", got)
	}
	if got := k.take(); !slices.Equal(got, []Kind{KindTraffic}) {
		t.Errorf("changes %v, want one EgressIPTraffic change", got)
	}
	ro.readTrafficStatus()
	if got := k.take(); len(got) != 0 {
		t.Errorf("an unchanged status file was reported as %v", got)
	}
	write(t, filepath.Join(dir, StatusDir, TrafficStatusDir), "db.yaml", "status: [not, a, map")
	ro.readTrafficStatus()
	if got := addrs(); !slices.Equal(got, []string{"192.0.2.8", "2001:db8::8"}) {
		t.Errorf("reader's addresses %v after a corrupt file, want the last good read", got)
	}
}
