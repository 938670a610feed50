package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageTagIsVersion checks that every Egret image in deploy/ carries the
// version the binary built by `make build` prints: a manifest still naming an
// older release (or :latest) would run other code than the one in this tree.
func TestImageTagIsVersion(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "build", "BIN="+dir)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "egret"), "version").Output()
	if err != nil {
		t.Fatalf("egret version: %v", err)
	}
	f := strings.Fields(string(out)) // egret <version> <rev> <go>
	if len(f) < 2 || f[1] == "dev" || f[1] == "" {
		t.Fatalf("egret version printed %q: make build sets no version", out)
	}
	want := "ghcr.io/egret-gw/egret:" + f[1]
	ms, _ := shippedManifests(t)
	n := 0
	for _, m := range ms {
		spec := get(m.o, "spec", "template", "spec")
		for _, key := range []string{"containers", "initContainers"} {
			cs, _ := get(spec, key).([]any)
			for _, c := range cs {
				img := str(c, "image")
				if !strings.Contains(img, "egret-gw/egret") {
					continue
				}
				n++
				if img != want {
					t.Errorf("%s: %s %s container %s runs %s, want %s (the version `egret version` prints)", m.file, m.o.kind(), m.o.name(), str(c, "name"), img, want)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no Egret image found in deploy/")
	}
	if b, err := os.ReadFile("../VERSION"); err != nil || strings.TrimSpace(string(b)) != f[1] {
		t.Errorf("VERSION holds %q, egret version prints %q", b, f[1])
	}
}
