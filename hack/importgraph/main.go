// Command importgraph draws the import graph of Egret's own packages from `go list`
// and checks the layering rules docs/architecture.md states. `make test` runs it with
// -check, which fails when the doc's diagram is stale or a rule is broken; -write
// rewrites the diagram in place.
//
// The diagram lists, for every production package (tests excluded), the packages of
// ours it imports directly.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

const (
	module = "github.com/egret-gw/egret/"
	begin  = "<!-- importgraph:begin (hack/importgraph -write regenerates this block) -->"
	end    = "<!-- importgraph:end -->"
)

// roles are the three consumers of the cluster model; none may import another.
var roles = []string{"control/controller", "control/gwagent", "control/steer"}

type pkg struct {
	ImportPath string
	Imports    []string
}

func main() {
	doc := flag.String("doc", "docs/architecture.md", "the page that holds the diagram")
	check := flag.Bool("check", false, "fail if the diagram in -doc is stale or a layering rule is broken")
	write := flag.Bool("write", false, "rewrite the diagram in -doc")
	flag.Parse()

	graph, err := load()
	if err != nil {
		fail(err)
	}
	diagram := draw(graph)
	problems := rules(graph)
	switch {
	case *write:
		if err := rewrite(*doc, diagram); err != nil {
			fail(err)
		}
	case *check:
		b, err := os.ReadFile(*doc)
		if err != nil {
			fail(err)
		}
		if have, ok := block(string(b)); !ok {
			problems = append(problems, fmt.Sprintf("%s has no %q … %q block", *doc, begin, end))
		} else if have != diagram {
			problems = append(problems, fmt.Sprintf("%s: the import diagram is stale; run `go run ./hack/importgraph -write`.\nwant:\n%s", *doc, diagram))
		}
	default:
		fmt.Print(diagram)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "importgraph:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "importgraph:", err)
	os.Exit(1)
}

// load returns each production package of the module (tests excluded) with the
// packages of ours it imports, paths relative to the module.
func load() (map[string][]string, error) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("go list: %v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list: %w", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		if strings.HasPrefix(name, "hack/") {
			continue
		}
		var deps []string
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				deps = append(deps, strings.TrimPrefix(i, module))
			}
		}
		graph[name] = deps
	}
	return graph, nil
}

// draw renders one line per package with the packages of ours it imports.
func draw(graph map[string][]string) string {
	names := make([]string, 0, len(graph))
	for n := range graph {
		names = append(names, n)
	}
	slices.Sort(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	var b strings.Builder
	b.WriteString("```\n")
	for _, n := range names {
		keep := slices.Clone(graph[n])
		slices.Sort(keep)
		if len(keep) == 0 {
			fmt.Fprintf(&b, "%-*s   (imports nothing of ours)\n", width, n)
			continue
		}
		fmt.Fprintf(&b, "%-*s ─► %s\n", width, n, strings.Join(keep, ", "))
	}
	b.WriteString("```\n")
	return b.String()
}

// rules returns every broken layering rule: no role imports another role, only
// commands and the benchmark harness import the lab or run the engine (the
// gateway agent and the lab write its configuration, gateway/config, which
// imports nothing of ours), only commands import metrics, and the agents
// render the egress plan (control/plan).
func rules(graph map[string][]string) []string {
	var bad []string
	for n, deps := range graph {
		if n == "gateway/config" && len(deps) > 0 {
			bad = append(bad, fmt.Sprintf("gateway/config imports %s: the configuration is plain data and imports nothing of ours", strings.Join(deps, ", ")))
		}
		for _, d := range deps {
			if d == "gateway/engine" && !strings.HasPrefix(n, "cmd/") && !strings.HasPrefix(n, "bench/") {
				bad = append(bad, fmt.Sprintf("%s imports gateway/engine: only commands and bench/ run the engine; write a gateway/config.Spec", n))
			}
			if slices.Contains(roles, n) && slices.Contains(roles, d) {
				bad = append(bad, fmt.Sprintf("role %s imports role %s; share through the cluster model, wire in cmd/", n, d))
			}
			command := strings.HasPrefix(n, "cmd/") || strings.HasPrefix(n, "bench/")
			if (d == "lab" || strings.HasPrefix(d, "lab/")) && !command {
				bad = append(bad, fmt.Sprintf("%s imports %s: only commands and bench/ may use the lab", n, d))
			}
			if d == "metrics" && !strings.HasPrefix(n, "cmd/") {
				bad = append(bad, fmt.Sprintf("%s imports metrics: only commands wire collectors", n))
			}
		}
	}
	// Who leaves as what is decided once, in the egress plan; the agents
	// only render their node's part of it.
	for _, r := range []string{"control/gwagent", "control/steer"} {
		if deps, ok := graph[r]; ok && !slices.Contains(deps, "control/plan") {
			bad = append(bad, fmt.Sprintf("%s does not import control/plan: it must render the egress plan, not decide ownership itself", r))
		}
	}
	slices.Sort(bad)
	return bad
}

// block returns the diagram between the markers of doc.
func block(doc string) (string, bool) {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", false
	}
	return strings.TrimPrefix(doc[i+len(begin):j], "\n"), true
}

func rewrite(path, diagram string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q block to rewrite", path, begin, end)
	}
	doc = doc[:i+len(begin)] + "\n" + diagram + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}
