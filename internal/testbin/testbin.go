// Package testbin builds the repository's commands for the tests that run
// them as processes: each command once per test process, with the flags of
// `make build` (CGO_ENABLED=0, -trimpath), so a test's build reuses the
// packages `make build` compiled instead of compiling them all again.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// buildEnv and buildFlags are `make build`'s settings that change what is
// compiled (its -ldflags only change the link, which no build shares); the
// Makefile exports the same to every go command it runs: keep them in step.
var (
	buildEnv   = []string{"CGO_ENABLED=0"}
	buildFlags = []string{"-trimpath"}
)

var (
	mu    sync.Mutex
	built = map[string]*binary{}
	dir   string
	sweep sync.Once
)

type binary struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of the binary of ./cmd/<name> ("egret",
// "egress-router"), built on first use in this process into Dir.
func Build(t testing.TB, name string) string {
	t.Helper()
	mu.Lock()
	b := built[name]
	if b == nil {
		b = &binary{}
		built[name] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = build(name) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Dir is the directory Build puts every binary in: one per test process,
// under the system's temporary directory; a later process removes the
// directories of processes that are gone.
func Dir() string {
	sweep.Do(func() {
		ents, _ := os.ReadDir(os.TempDir())
		for _, e := range ents {
			pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "egret-testbin-"))
			if err != nil || !strings.HasPrefix(e.Name(), "egret-testbin-") || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
			}
		}
	})
	return filepath.Join(os.TempDir(), fmt.Sprintf("egret-testbin-%d", os.Getpid()))
}

// Remove deletes Dir; a package's TestMain calls it after the tests ran.
func Remove() { os.RemoveAll(Dir()) }

func build(name string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(Dir(), name)
	args := append(append([]string{"build"}, buildFlags...), "-o", bin, "github.com/egret-gw/egret/cmd/"+name)
	cmd := exec.Command(gobin, args...)
	cmd.Env = append(os.Environ(), buildEnv...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// Root is the repository's top directory, found from the test's working
// directory (its package's): the go.mod above it. Source paths from
// runtime.Caller cannot serve, since the tests build with -trimpath.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}
