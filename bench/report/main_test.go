package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGenerate: the parts present go in the fixed order whatever else the
// folder holds, their plots are copied and relinked, stale plots of a part
// go, and the text outside the markers stays.
func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	in, docs := filepath.Join(dir, "report"), filepath.Join(dir, "docs")
	for _, d := range []string{in, filepath.Join(docs, "bench")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(in, "failover.md"), "### Failover\n![f](failover-cdf.png)\n")
	write(t, filepath.Join(in, "failover-cdf.png"), "png-f")
	write(t, filepath.Join(in, "dataplane.md"), "### Data plane\n![t](dataplane-throughput.png)\n")
	write(t, filepath.Join(in, "dataplane-throughput.png"), "png-d")
	write(t, filepath.Join(in, "notes.md"), "not a part")
	write(t, filepath.Join(docs, "bench", "dataplane-old.png"), "stale")
	write(t, filepath.Join(docs, "bench", "controlplane-x.png"), "other part's, kept")
	doc := filepath.Join(docs, "benchmarks.md")
	write(t, doc, "# Benchmarks\nintro\n"+begin+"\nold text\n"+end+"\ntail\n")
	if err := generate(in, doc, filepath.Join(docs, "bench")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	got := string(b)
	d, f := strings.Index(got, "### Data plane"), strings.Index(got, "### Failover")
	if d < 0 || f < 0 || d > f {
		t.Errorf("want the data plane before failover:\n%s", got)
	}
	for _, want := range []string{"# Benchmarks\nintro\n", "](bench/dataplane-throughput.png)", "](bench/failover-cdf.png)", end + "\ntail\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("doc lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"old text", "not a part"} {
		if strings.Contains(got, bad) {
			t.Errorf("doc still has %q", bad)
		}
	}
	if _, err := os.Stat(filepath.Join(docs, "bench", "dataplane-old.png")); err == nil {
		t.Error("a stale plot of the data plane stayed")
	}
	for _, keep := range []string{"dataplane-throughput.png", "failover-cdf.png", "controlplane-x.png"} {
		if _, err := os.Stat(filepath.Join(docs, "bench", keep)); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
	// A second run gives the same doc.
	if err := generate(in, doc, filepath.Join(docs, "bench")); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(doc); string(b2) != got {
		t.Error("a second run changed the doc")
	}
}

func TestGenerateRefuses(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "b.md")
	write(t, doc, "no markers\n")
	write(t, filepath.Join(dir, "dataplane.md"), "x")
	if err := generate(dir, doc, filepath.Join(dir, "bench")); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("no markers: got %v", err)
	}
	write(t, doc, begin+"\n"+end+"\n")
	empty := t.TempDir()
	if err := generate(empty, doc, filepath.Join(dir, "bench")); err == nil {
		t.Error("an empty report folder was accepted")
	}
}
