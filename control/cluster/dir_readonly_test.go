package cluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	corev1 "k8s.io/api/core/v1"
)

// A reader (steer, gateway agent) never writes into the directory: no
// status folder or events file is created, a removed manifest's status file
// stays for the controller, and status writes are refused.
func TestReadOnlyWritesNothing(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	ro, err := NewDirReader(dir, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ro.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{StatusDir, EventsFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("a read-only source created %s (%v)", name, err)
		}
	}
	ro.Event(&corev1.ObjectReference{Kind: "EgressIP", Name: "egress-group1"}, "Warning", "Test", "not written")
	e, ok := ro.EgressIP("egress-group1")
	if !ok {
		t.Fatal("manifest not loaded")
	}
	if err := ro.UpdateEgressIP(ctx, e.DeepCopy()); !errors.Is(err, ErrReadOnly) {
		t.Errorf("UpdateEgressIP on a read-only source: %v, want ErrReadOnly", err)
	}

	// The controller writes a status; the manifest then disappears. The
	// reader sees the object go but leaves the status file alone.
	ctl, _ := start(t, dir)
	cur, _ := ctl.EgressIP("egress-group1")
	up := cur.DeepCopy()
	up.Status.Items = append(up.Status.Items, up.Status.Items...)
	if err := ctl.UpdateEgressIP(ctx, up); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(dir, StatusDir, "egress-group1.yaml")
	os.Remove(filepath.Join(dir, "all.yaml"))
	ro.Reload()
	if len(ro.View().EgressIPs) != 0 {
		t.Error("the reader still has the removed EgressIP")
	}
	if _, err := os.Stat(status); err != nil {
		t.Errorf("the reader deleted the controller's status file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, EventsFile)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, EventsFile)); strings.Contains(string(b), "not written") {
		t.Error("the reader's event reached events.log")
	}
	ctl.Reload() // the controller, the status writer, removes it
	if _, err := os.Stat(status); !os.IsNotExist(err) {
		t.Errorf("the controller kept the status file of a removed object: %v", err)
	}
}

// countingHandler counts log records by message.
type countingHandler struct {
	slog.Handler
	n map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.n[r.Message]++
	return nil
}

// An unlistable directory is logged when it becomes so and when it
// recovers, not on every poll.
func TestListErrorLoggedOncePerChange(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "objects")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &countingHandler{Handler: slog.DiscardHandler, n: map[string]int{}}
	s, err := NewDirReader(dir, 0, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	s.Reload()
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		s.Reload()
	}
	if got := s.Errors.Load(); got != 10 {
		t.Errorf("Errors = %d, want every failed poll counted (10)", got)
	}
	if got := h.n["file source: cannot list the directory"]; got != 1 {
		t.Errorf("logged 'cannot list' %d times over 10 polls, want once", got)
	}
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	s.Reload()
	if got := h.n["file source: the directory can be listed again"]; got != 1 {
		t.Errorf("logged the recovery %d times, want once", got)
	}
	os.Rename(dir, dir+".away")
	s.Reload()
	if got := h.n["file source: cannot list the directory"]; got != 2 {
		t.Errorf("a second outage logged %d times in all, want 2", got)
	}
}

// A reader follows the status files a controller in another process
// writes: View carries them, a change is reported as KindEgressIP, and a
// corrupt file is a failed Check that keeps the last good read.
func TestReaderFollowsStatusFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	ro, err := NewDirReader(dir, time.Hour, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var k kinds
	if err := ro.Start(ctx, k.add); err != nil {
		t.Fatalf("a missing status folder must not stop a reader: %v", err)
	}
	if _, err := ro.Check(ctx); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check without a status folder: %v, want ErrNotExist", err)
	}
	items := func() []egressv1.EgressIPStatusItem {
		v := ro.View()
		if len(v.EgressIPs) != 1 {
			t.Fatalf("%d EgressIPs, want 1", len(v.EgressIPs))
		}
		return v.EgressIPs[0].Status.Items
	}
	manifest := items()

	os.Mkdir(filepath.Join(dir, StatusDir), 0o755)
	status := "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {name: egress-group1}\nstatus:\n  items:\n  - {node: g9, egressIP: 192.168.126.10}\n"
	write(t, filepath.Join(dir, StatusDir), "egress-group1.yaml", status)
	if _, err := ro.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := items(); len(got) != 1 || got[0].Node != "g9" {
		t.Errorf("status %v, want the status file's (g9)", got)
	}
	if got := k.take(); !slices.Equal(got, []Kind{KindEgressIP}) {
		t.Errorf("changes %v, want one EgressIP change", got)
	}
	if _, err := ro.Check(ctx); err != nil || len(k.take()) != 0 {
		t.Errorf("an unchanged status file was reported as a change (err %v)", err)
	}

	write(t, filepath.Join(dir, StatusDir), "egress-group1.yaml", "status: [not, a, map")
	if _, err := ro.Check(ctx); err == nil {
		t.Error("a corrupt status file passed Check")
	}
	if got := items(); len(got) != 1 || got[0].Node != "g9" {
		t.Errorf("status %v after a corrupt file, want the last good read (g9)", got)
	}
	os.Remove(filepath.Join(dir, StatusDir, "egress-group1.yaml"))
	if _, err := ro.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := items(); !slices.Equal(got, manifest) {
		t.Errorf("status %v after the file went, want the manifest's %v", got, manifest)
	}
}

// The controller's egret.io/standby annotation travels with the status:
// written into the status file by UpdateEgressIP (never into the user's
// manifest), shown by a reader's View and read
// back by a restarted controller; an update without it removes it.
func TestStandbyAnnotationInStatusFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "all.yaml", manifests)
	ctx := context.Background()
	ctl, _ := start(t, dir)
	cur, _ := ctl.EgressIP("egress-group1")
	up := cur.DeepCopy()
	const standby = `{"192.168.126.10":"gw2"}`
	up.Annotations = map[string]string{egressv1.AnnotationStandby: standby}
	if err := ctl.UpdateEgressIP(ctx, up); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "all.yaml")); strings.Contains(string(b), egressv1.AnnotationStandby) {
		t.Error("the standby annotation was written into the user's manifest")
	}
	if e, _ := ctl.EgressIP("egress-group1"); e.Annotations[egressv1.AnnotationStandby] != standby {
		t.Errorf("controller's cache: standby %q, want %q", e.Annotations[egressv1.AnnotationStandby], standby)
	}
	ro, err := NewDirReader(dir, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ro.Reload()
	if _, err := ro.Check(ctx); err != nil {
		t.Fatal(err)
	}
	readerSees := func() string {
		for _, e := range ro.View().EgressIPs {
			if e.Name == "egress-group1" {
				return e.Annotations[egressv1.AnnotationStandby]
			}
		}
		return "(object missing)"
	}
	if got := readerSees(); got != standby {
		t.Errorf("reader's view: standby %q, want %q", got, standby)
	}
	// A restarted controller reads it back with the status.
	again, _ := start(t, dir)
	e, _ := again.EgressIP("egress-group1")
	if e.Annotations[egressv1.AnnotationStandby] != standby {
		t.Errorf("restarted controller: standby %q, want %q", e.Annotations[egressv1.AnnotationStandby], standby)
	}
	// An update without the annotation removes it, for the reader too.
	up = e.DeepCopy()
	delete(up.Annotations, egressv1.AnnotationStandby)
	if err := again.UpdateEgressIP(ctx, up); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readerSees(); got != "" {
		t.Errorf("reader's view after the standby was removed: %q", got)
	}
}
