package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// benchOutput is go test -bench output for every bound: per round, the
// guarded benchmark at ratio[i] of its baseline (cpu-ns/op for the
// conntrack pair, which reports it, ns/op for the gateway pair, whose
// baseline does not), in go test's own format.
func benchOutput(ratio map[string][]float64) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "goos: linux\ngoarch: amd64\npkg: %s%s\ncpu: AMD EPYC\n", module, r.Pkg)
		rounds := 0
		for _, bd := range bounds {
			if bd.Pkg == r.Pkg {
				rounds = max(rounds, len(ratio[bd.Bench]))
			}
		}
		for i := 0; i < rounds; i++ {
			seen := map[string]bool{}
			for _, bd := range bounds {
				if bd.Pkg != r.Pkg {
					continue
				}
				if !seen[bd.Base] {
					seen[bd.Base] = true
					fmt.Fprintf(&b, "%s-1 \t 1000000\t 200.0 ns/op\t 100.0 cpu-ns/op\t 0 B/op\t 0 allocs/op\n", bd.Base)
				}
				v := ratio[bd.Bench][i]
				fmt.Fprintf(&b, "%s \t 1000000\t %.4f ns/op\t %.4f cpu-ns/op\t 94.32 bytes/flow\t 0 B/op\t 0 allocs/op\n", bd.Bench, v*200, v*100)
			}
		}
		fmt.Fprintf(&b, "PASS\nok  \t%s%s\t3.2s\n", module, r.Pkg)
	}
	// The gateway baseline (copy_only) reports no thread CPU time.
	return regexp.MustCompile(`(BenchmarkPipeline/copy_only-1 \t 1000000\t 200.0 ns/op)\t 100.0 cpu-ns/op`).ReplaceAllString(b.String(), "$1")
}

// good is a ratio within every bound, per round.
func good() map[string][]float64 {
	m := map[string][]float64{}
	for _, b := range bounds {
		m[b.Bench] = []float64{b.Max * 0.5, b.Max * 0.6, b.Max * 0.55}
	}
	return m
}

func runGuard(t *testing.T, out string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	in := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(in, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	status = guard(append([]string{"-in", in}, args...), &so, &se)
	return status, so.String(), se.String()
}

// TestGuardPasses: ratios inside every bound exit 0 and print each check.
func TestGuardPasses(t *testing.T) {
	status, stdout, stderr := runGuard(t, benchOutput(good()))
	if status != 0 {
		t.Fatalf("status %d for ratios within the bounds\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	if n := strings.Count(stdout, "ok    "); n != len(bounds) {
		t.Errorf("%d checks printed as ok, want %d:\n%s", n, len(bounds), stdout)
	}
}

// TestGuardFailsOnBadRatio: one ratio past its bound in most rounds fails
// the guard (status 1) with a message naming the benchmark, its ratio and
// the bound; a single bad round among good ones does not (the median).
func TestGuardFailsOnBadRatio(t *testing.T) {
	for _, b := range bounds {
		t.Run(b.Bench, func(t *testing.T) {
			r := good()
			r[b.Bench] = []float64{b.Max * 1.2, b.Max * 0.5, b.Max * 3}
			status, stdout, stderr := runGuard(t, benchOutput(r))
			if status != 1 {
				t.Fatalf("status %d for %s at 1.2x its bound, want 1\nstdout:\n%s\nstderr:\n%s", status, b.Bench, stdout, stderr)
			}
			want := fmt.Sprintf("benchguard: %s %s is %.3gx %s, past its bound %.3gx", b.Pkg, b.Bench, b.Max*1.2, b.Base, b.Max)
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
			if n := strings.Count(stdout, "FAIL  "); n != 1 {
				t.Errorf("%d checks failed, want 1:\n%s", n, stdout)
			}

			r[b.Bench] = []float64{b.Max * 0.5, b.Max * 5, b.Max * 0.9}
			if status, stdout, stderr := runGuard(t, benchOutput(r)); status != 0 {
				t.Errorf("status %d for one bad round of three\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
			}
		})
	}
}

// TestGuardMissingResult: a benchmark that is not in the output (renamed,
// or the run died) is status 2, not a pass.
func TestGuardMissingResult(t *testing.T) {
	b := bounds[0]
	out := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(b.Bench)+` .*\n`).ReplaceAllString(benchOutput(good()), "")
	status, _, stderr := runGuard(t, out)
	if status != 2 || !strings.Contains(stderr, "no result for "+b.Bench) {
		t.Errorf("status %d, stderr %q; want 2 and %q", status, stderr, "no result for "+b.Bench)
	}
	if status, _, stderr := runGuard(t, "Benchmark"+strings.Repeat("x", 3)+" 10 5 ns/op 7\n"); status != 2 || !strings.Contains(stderr, "value without a unit") {
		t.Errorf("malformed line: status %d, stderr %q", status, stderr)
	}
}

// TestBoundsWellFormed: every bound names a package that is run, one
// top-level benchmark per package (benchRegexp builds a two-level pattern),
// a positive limit and a reason; and the pattern selects exactly the
// guarded names.
func TestBoundsWellFormed(t *testing.T) {
	top := map[string]string{}
	for _, b := range bounds {
		ran := false
		for _, r := range runs {
			ran = ran || r.Pkg == b.Pkg
		}
		if !ran || b.Max <= 0 || b.Why == "" {
			t.Errorf("%s: package run %v, bound %v, reason %q", b.Bench, ran, b.Max, b.Why)
		}
		for _, name := range []string{b.Bench, b.Base} {
			tp, sub, ok := strings.Cut(name, "/")
			if !ok || strings.Contains(sub, "/") {
				t.Errorf("%s: want Benchmark<Name>/<sub>", name)
			}
			if have, ok := top[b.Pkg]; ok && have != tp {
				t.Errorf("./%s has bounds under %s and %s", b.Pkg, have, tp)
			}
			top[b.Pkg] = tp
		}
	}
	for _, r := range runs {
		re := benchRegexp(r.Pkg)
		parts := strings.SplitN(re, "/", 2)
		for _, b := range bounds {
			if b.Pkg != r.Pkg {
				continue
			}
			for _, name := range []string{b.Bench, b.Base} {
				tp, sub, _ := strings.Cut(name, "/")
				if !regexp.MustCompile(parts[0]).MatchString(tp) || !regexp.MustCompile(parts[1]).MatchString(sub) {
					t.Errorf("pattern %q does not select %s", re, name)
				}
			}
		}
		if regexp.MustCompile(parts[1]).MatchString("flows=1M_batch_seq_other") {
			t.Errorf("pattern %q selects more than the guarded names", re)
		}
	}
}
