package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry/remote"
)

// pushed is the line `helm push` ends with: the repository and tag it wrote.
var pushed = regexp.MustCompile(`(?m)^Pushed: ([^\s]+)/charts/([^\s/:]+):([^\s:]+)\s*$`)

// runChart is `ocitool chart`: see the package comment.
func runChart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	helm := fs.String("helm", "helm", "the helm binary")
	out := fs.String("out", "", "the OCI image layout directory to write (must not exist)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *out == "" {
		return fmt.Errorf("chart: want -out DIR and one packaged chart, got %q", args)
	}
	tgz := fs.Arg(0)
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("chart: %s exists; the layout must hold this chart only", *out)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("chart: a loopback port for the registry: %w", err)
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(ln) //nolint:errcheck // Close below ends it; its error says only that.
	defer srv.Close()

	// Helm's own configuration and caches in a directory of their own: the push must
	// neither read the release owner's registry logins nor leave anything behind.
	home, err := os.MkdirTemp("", "ocitool-helm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, *helm, "push", tgz, "oci://"+ln.Addr().String()+"/charts", "--plain-http")
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"HELM_REGISTRY_CONFIG="+filepath.Join(home, "registry.json"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chart: helm push %s: %w\n%s", tgz, err, b)
	}
	m := pushed.FindSubmatch(b)
	if m == nil {
		return fmt.Errorf("chart: helm push printed no %q line:\n%s", "Pushed: <host>/charts/<name>:<tag>", b)
	}
	name, tag := string(m[2]), string(m[3])

	repo, err := remote.NewRepository(string(m[1]) + "/charts/" + name)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	repo.PlainHTTP = true
	store, err := oci.NewWithContext(ctx, *out)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	desc, err := oras.Copy(ctx, repo, tag, store, tag, oras.DefaultCopyOptions)
	if err != nil {
		return fmt.Errorf("chart: copy %s:%s into %s: %w", name, tag, *out, err)
	}
	fmt.Printf("%s: chart %s:%s, manifest %s\n", *out, name, tag, desc.Digest)
	return nil
}
