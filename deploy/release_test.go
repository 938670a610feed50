package deploy_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/egret-gw/egret/internal/kubetest"
)

// The media types the release's OCI outputs must carry: the OCI image spec's, and
// those of Helm's OCI support (helm.sh/docs/topics/registries), which `helm pull`
// and `helm install oci://` expect.
const (
	ociIndex          = "application/vnd.oci.image.index.v1+json"
	ociManifest       = "application/vnd.oci.image.manifest.v1+json"
	helmConfigType    = "application/vnd.cncf.helm.config.v1+json"
	helmChartLayer    = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// releaseBinaries are the binaries a release ships per arch (docs/releasing.md).
var releaseBinaries = []string{"egret", "egress-router"}

// ociDescriptor is an OCI content descriptor, the fields the checks read.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// ociIndexOrManifest is an OCI image index or manifest.
type ociIndexOrManifest struct {
	MediaType string          `json:"mediaType"`
	Manifests []ociDescriptor `json:"manifests"`
	Config    ociDescriptor   `json:"config"`
	Layers    []ociDescriptor `json:"layers"`
}

// TestRelease runs `make release` as CI does, without RELEASE_KEY, into a temporary
// folder, and checks what it made, with code of its own rather than the tools that made
// it where it can: the image index has linux/amd64 and linux/arm64 and each holds the
// released binaries; the binaries are static ELF of their arch; each SBOM lists exactly
// the modules `go version -m` reads from its binary; SHA256SUMS covers every file; both
// signatures verify with the public key beside them by docs/releasing.md's command, and
// fail on a changed bit; the chart's OCI layout carries the packaged chart with Helm's
// media types; and the packaged chart installs into a real kube-apiserver.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both arches, the image and the chart")
	}
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "make release builds the image with buildah, which needs root here")
	}
	hb, kc := helmBin(t), kubectl(t)
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	out := filepath.Join(t.TempDir(), version)
	cmd := exec.Command("make", "-s", "release", "RELEASE_OUT="+out)
	cmd.Dir = ".."
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "RELEASE_KEY=") || strings.HasPrefix(e, "RELEASE_PUB=")
	})
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, log)
	}
	t.Logf("make release:\n%s", log)
	if !bytes.Contains(log, []byte("THROWAWAY")) {
		t.Errorf("make release without RELEASE_KEY did not say that its key is a throwaway")
	}

	t.Run("SHA256SUMS", func(t *testing.T) { checkSums(t, out) })
	t.Run("signatures", func(t *testing.T) {
		ms := kubetest.Tool(t, "minisign", "hack/release/tools.sh")
		pub := filepath.Join(out, "minisign.pub")
		for _, f := range []string{"SHA256SUMS", "egret-" + version + ".oci-index.json"} {
			path := filepath.Join(out, f)
			b, err := exec.Command(ms, "-V", "-p", pub, "-m", path).CombinedOutput()
			if err != nil {
				t.Errorf("minisign -V -p minisign.pub -m %s: %v\n%s", f, err, b)
				continue
			}
			if !bytes.Contains(b, []byte("Trusted comment: egret "+version+", commit ")) || !bytes.Contains(b, []byte("THROWAWAY")) {
				t.Errorf("%s: the trusted comment does not name the release, its commit and the throwaway key:\n%s", f, b)
			}
			changed := readFile(t, path)
			changed[len(changed)/2] ^= 1
			other := filepath.Join(t.TempDir(), f)
			if err := os.WriteFile(other, changed, 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command(ms, "-V", "-p", pub, "-m", other, "-x", path+".minisig").CombinedOutput(); err == nil || !bytes.Contains(b, []byte("signature verification failed")) {
				t.Errorf("%s with one bit changed: minisign -V says %v:\n%s", f, err, b)
			}
		}
	})
	t.Run("image", func(t *testing.T) { checkImage(t, out, version) })
	t.Run("binaries", func(t *testing.T) {
		for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
			for _, name := range releaseBinaries {
				checkStaticELF(t, filepath.Join(out, "linux-"+arch, name), machine)
			}
		}
	})
	t.Run("SBOM", func(t *testing.T) {
		for _, arch := range []string{"amd64", "arm64"} {
			for _, name := range releaseBinaries {
				checkSBOM(t, filepath.Join(out, "linux-"+arch, name),
					filepath.Join(out, "sbom", name+"-linux-"+arch+".cdx.json"), version)
			}
		}
	})
	tgz := filepath.Join(out, "chart", "egret-"+version+".tgz")
	t.Run("chart OCI layout", func(t *testing.T) { checkChartLayout(t, filepath.Join(out, "chart", "oci"), tgz, version) })
	t.Run("chart installs", func(t *testing.T) {
		// The package is the tree's chart: it renders the same objects.
		sets := []string{"--set", "interfaces.gateway={eth1},interfaces.underlay=eth0"}
		fromTree, fromPkg := helmTemplateOf(t, hb, chart, sets...), helmTemplateOf(t, hb, tgz, sets...)
		if len(fromPkg) != len(fromTree) {
			t.Fatalf("the packaged chart renders %d objects, deploy/helm/egret %d", len(fromPkg), len(fromTree))
		}
		for i := range fromPkg {
			if d := diff(map[string]any(fromTree[i].o), map[string]any(fromPkg[i].o)); d != "" {
				t.Errorf("%s: the packaged chart renders it otherwise (tree | package):\n%s", objKey(fromTree[i].o), d)
			}
		}
		env := kubetest.Start(t)
		run(t, nil, hb, append([]string{"--kubeconfig", env.Kubeconfig, "install", "egret", tgz,
			"-n", "egret-system", "--create-namespace"}, sets...)...)
		allInstalled(t, kc, env.Kubeconfig, fromPkg)
		img := string(run(t, nil, kc, "--kubeconfig", env.Kubeconfig, "-n", "egret-system", "get", "ds", "egret-gateway",
			"-o", "jsonpath={.spec.template.spec.containers[0].image}"))
		if want := "ghcr.io/egret-gw/egret:" + version; img != want {
			t.Errorf("the installed gateway runs %s, want the released image %s", img, want)
		}
	})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkSums checks that SHA256SUMS in dir lists every file but the signatures and
// keys, each with its hash.
func checkSums(t *testing.T, dir string) {
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(dir, "SHA256SUMS"))))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS: line %q is not sha256sum's", sc.Text())
		}
		listed[name] = sum
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "SHA256SUMS" || strings.HasSuffix(rel, ".minisig") || strings.HasPrefix(rel, "minisign.") {
			return nil
		}
		n++
		sum, ok := listed[rel]
		switch {
		case !ok:
			t.Errorf("SHA256SUMS lacks %s", rel)
		case sum != sha256Hex(readFile(t, path)):
			t.Errorf("SHA256SUMS: %s has another hash", rel)
		}
		delete(listed, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range listed {
		t.Errorf("SHA256SUMS lists %s, which is not in the release", name)
	}
	if n < 10 {
		t.Errorf("only %d files in the release", n)
	}
}

// checkImage checks the OCI archive: its one image is the signed index, which names
// linux/amd64 and linux/arm64, each a manifest whose config says its platform and whose
// layers hold the released binaries of that arch.
func checkImage(t *testing.T, dir, version string) {
	archive := filepath.Join(dir, "egret-"+version+".oci.tar")
	blobs := smallBlobs(t, archive)
	var layout ociIndexOrManifest
	if err := json.Unmarshal(blobs["index.json"], &layout); err != nil || len(layout.Manifests) != 1 {
		t.Fatalf("%s: index.json names %d images, want 1 (%v)", archive, len(layout.Manifests), err)
	}
	top := layout.Manifests[0]
	if top.MediaType != ociIndex {
		t.Fatalf("%s holds a %s, want an image index %s", archive, top.MediaType, ociIndex)
	}
	if want := "ghcr.io/egret-gw/egret:" + version; top.Annotations[refNameAnnotation] != want {
		t.Errorf("%s: the image is named %q, want %q", archive, top.Annotations[refNameAnnotation], want)
	}
	signed := readFile(t, filepath.Join(dir, "egret-"+version+".oci-index.json"))
	if "sha256:"+sha256Hex(signed) != top.Digest || !bytes.Equal(blobs[blobPath(top.Digest)], signed) {
		t.Fatalf("the signed index file is not the archive's image index %s", top.Digest)
	}
	var index ociIndexOrManifest
	if err := json.Unmarshal(signed, &index); err != nil {
		t.Fatal(err)
	}
	layers := map[string]string{} // layer blob path → arch
	var platforms []string
	for _, m := range index.Manifests {
		if m.Platform == nil || m.MediaType != ociManifest {
			t.Errorf("index entry %s: %s without a platform", m.Digest, m.MediaType)
			continue
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		platforms = append(platforms, p)
		var man ociIndexOrManifest
		var cfg struct{ OS, Architecture string }
		if err := errors.Join(json.Unmarshal(blobs[blobPath(m.Digest)], &man),
			json.Unmarshal(blobs[blobPath(man.Config.Digest)], &cfg)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if cfg.OS+"/"+cfg.Architecture != p {
			t.Errorf("the %s manifest's config says %s/%s", p, cfg.OS, cfg.Architecture)
		}
		for _, l := range man.Layers {
			layers[blobPath(l.Digest)] = m.Platform.Architecture
		}
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the image index has %v, want linux/amd64 and linux/arm64", platforms)
	}
	// The binaries each arch's layers hold, by arch and name.
	got := map[string]string{}
	eachTarEntry(t, archive, func(name string, r io.Reader) {
		arch, ok := layers[name]
		if !ok {
			return
		}
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatalf("layer %s: %v", name, err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", name, err)
			}
			if dir, file := filepath.Split(strings.TrimPrefix(h.Name, "/")); dir == "usr/local/bin/" {
				hash := sha256.New()
				if _, err := io.Copy(hash, tr); err != nil {
					t.Fatal(err)
				}
				got[arch+"/"+file] = hex.EncodeToString(hash.Sum(nil))
			}
		}
	})
	for _, arch := range []string{"amd64", "arm64"} {
		for _, name := range releaseBinaries {
			want := sha256Hex(readFile(t, filepath.Join(dir, "linux-"+arch, name)))
			if got[arch+"/"+name] != want {
				t.Errorf("the linux/%s image's /usr/local/bin/%s is not linux-%s/%s (sha256 %q, want %s)", arch, name, arch, name, got[arch+"/"+name], want)
			}
		}
	}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// eachTarEntry calls f with the name and content of each regular file in the tar file
// at path.
func eachTarEntry(t *testing.T, path string, f func(name string, r io.Reader)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tr := tar.NewReader(file)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			f(strings.TrimPrefix(h.Name, "./"), tr)
		}
	}
}

// smallBlobs reads the files of an OCI archive under 1 MiB (index.json, manifests,
// configs) by name.
func smallBlobs(t *testing.T, archive string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	eachTarEntry(t, archive, func(name string, r io.Reader) {
		b, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) <= 1<<20 {
			out[name] = b
		}
	})
	return out
}

// checkStaticELF checks that path is a 64-bit ELF executable for machine that needs
// no dynamic loader and no shared library: what runs FROM scratch.
func checkStaticELF(t *testing.T, path string, machine elf.Machine) {
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if f.Machine != machine || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v %v, want a %v %v executable", path, f.Class, f.Machine, f.Type, elf.ELFCLASS64, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has a %v segment: not static", path, p.Type)
		}
	}
}

// checkSBOM checks that the CycloneDX SBOM at sbomPath describes the binary at bin:
// the main module and each dependency, with its version, exactly as `go version -m`
// reads them from the binary, and the Go standard library at the binary's Go version,
// each for the binary's architecture.
func checkSBOM(t *testing.T, bin, sbomPath, version string) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	vm, err := exec.Command(gobin, "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	var goVersion, mainPath, goarch string
	var want []string // "path version" of each dependency, and std
	for i, line := range strings.Split(string(vm), "\n") {
		f := strings.Fields(line)
		switch {
		case i == 0 && len(f) == 2:
			goVersion = f[1]
			want = append(want, "std "+goVersion)
		case len(f) >= 3 && f[0] == "dep":
			want = append(want, f[1]+" "+f[2])
		case len(f) >= 2 && f[0] == "mod":
			mainPath = f[1]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "GOARCH="):
			goarch = strings.TrimPrefix(f[1], "GOARCH=")
		case len(f) >= 1 && f[0] == "=>":
			t.Fatalf("go version -m %s: a replaced module (%s): teach this test how the SBOM names it", bin, line)
		}
	}
	if mainPath == "" || goarch == "" || len(want) < 10 {
		t.Fatalf("go version -m %s found no modules:\n%s", bin, vm)
	}
	var sbom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct{ Name, Version, Purl string } `json:"components"`
	}
	if err := json.Unmarshal(readFile(t, sbomPath), &sbom); err != nil || sbom.BOMFormat != "CycloneDX" {
		t.Fatalf("%s: not a CycloneDX JSON SBOM (%v)", sbomPath, err)
	}
	if c := sbom.Metadata.Component; c.Name != mainPath || c.Version != "v"+version {
		t.Errorf("%s describes %s %s, want %s v%s", sbomPath, c.Name, c.Version, mainPath, version)
	}
	var got, otherArch []string
	for _, c := range sbom.Components {
		got = append(got, c.Name+" "+c.Version)
		// A scanner matches advisories for one architecture by the package URL.
		if !strings.Contains(c.Purl, "goarch="+goarch+"&") || !strings.Contains(c.Purl, "goos=linux&") {
			otherArch = append(otherArch, c.Purl)
		}
	}
	if len(otherArch) > 0 {
		t.Errorf("%s: %d package URLs are not for linux/%s, as %s", sbomPath, len(otherArch), goarch, otherArch[0])
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s lists other modules than go version -m %s:\nonly in the SBOM: %v\nonly in the binary: %v",
			sbomPath, bin, minus(got, want), minus(want, got))
	}
}

// minus is what of a (sorted) is not in b.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
		}
	}
	return out
}

// checkChartLayout checks the chart's OCI image layout: one artifact tagged with the
// version whose manifest has Helm's config and chart media types, whose config names
// the chart and its version, and whose one layer is the packaged chart.
func checkChartLayout(t *testing.T, dir, tgz, version string) {
	if b := readFile(t, filepath.Join(dir, "oci-layout")); !bytes.Contains(b, []byte(`"imageLayoutVersion":"1.0.0"`)) {
		t.Errorf("oci-layout: %s", b)
	}
	var layout ociIndexOrManifest
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "index.json")), &layout); err != nil || len(layout.Manifests) != 1 {
		t.Fatalf("index.json names %d artifacts, want 1 (%v)", len(layout.Manifests), err)
	}
	top := layout.Manifests[0]
	if top.MediaType != ociManifest || top.Annotations[refNameAnnotation] != version {
		t.Errorf("the chart's artifact is a %s tagged %q, want a %s tagged %s", top.MediaType, top.Annotations[refNameAnnotation], ociManifest, version)
	}
	blob := func(d ociDescriptor) []byte {
		b := readFile(t, filepath.Join(dir, blobPath(d.Digest)))
		if "sha256:"+sha256Hex(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s does not match its descriptor", d.Digest)
		}
		return b
	}
	var man ociIndexOrManifest
	if err := json.Unmarshal(blob(top), &man); err != nil {
		t.Fatal(err)
	}
	if man.Config.MediaType != helmConfigType || len(man.Layers) != 1 || man.Layers[0].MediaType != helmChartLayer {
		t.Fatalf("the chart's manifest has config %s and layers %v, want %s and one %s", man.Config.MediaType, man.Layers, helmConfigType, helmChartLayer)
	}
	var cfg struct {
		Name, Version string
		AppVersion    string `json:"appVersion"`
	}
	if err := json.Unmarshal(blob(man.Config), &cfg); err != nil || cfg.Name != "egret" || cfg.Version != version || cfg.AppVersion != version {
		t.Errorf("the chart's config names %+v, want egret %s, appVersion %s (%v)", cfg, version, version, err)
	}
	if !bytes.Equal(blob(man.Layers[0]), readFile(t, tgz)) {
		t.Errorf("the chart's layer is not %s", tgz)
	}
}
