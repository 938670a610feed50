// Command benchguard runs the few benchmarks that guard the data plane's
// speed and fails when one of their ratios is past its bound (bounds.go):
// TrackBatch against a Go map in ./conntrack, the pipeline against copying
// the frame in ./gateway. Each ratio is of two benchmarks of the same run,
// never an absolute time, so the check holds on a loaded, shared machine.
// `make bench-guard` runs it; run it before submitting any change to
// conntrack/, nat/ or gateway/.
//
// With -in it reads `go test -bench` output from a file instead of running
// the benchmarks (its test feeds it synthetic output that way).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const module = "github.com/egret-gw/egret/"

func main() {
	os.Exit(guard(os.Args[1:], os.Stdout, os.Stderr))
}

// guard is the command: it returns the exit status, 0 when every ratio is
// within its bound, 1 when one is past it, 2 when it cannot tell (the
// benchmarks failed or a result is missing).
func guard(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "read `go test -bench` output from this file instead of running the benchmarks")
	count := fs.Int("count", 3, "rounds of each benchmark, each a go test run of its own; the median ratio is checked")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var out []byte
	if *in != "" {
		b, err := os.ReadFile(*in)
		if err != nil {
			fmt.Fprintf(stderr, "benchguard: cannot read the benchmark output: %v\n", err)
			return 2
		}
		out = b
	} else {
		if *count < 1 {
			fmt.Fprintf(stderr, "benchguard: -count must be at least 1, got %d\n", *count)
			return 2
		}
		for _, r := range runs {
			b, err := runBench(r, *count, stderr)
			if err != nil {
				fmt.Fprintf(stderr, "benchguard: %v\n", err)
				return 2
			}
			out = append(out, b...)
		}
	}
	res, err := parse(strings.NewReader(string(out)))
	if err != nil {
		fmt.Fprintf(stderr, "benchguard: %v\n", err)
		return 2
	}
	status := 0
	for _, b := range bounds {
		c, err := check(res, b)
		if err != nil {
			fmt.Fprintf(stderr, "benchguard: %v\n", err)
			status = max(status, 2)
			continue
		}
		if c.ok() {
			fmt.Fprintf(stdout, "ok    %s\n", c)
			continue
		}
		fmt.Fprintf(stdout, "FAIL  %s\n", c)
		fmt.Fprintf(stderr, "benchguard: %s %s is %.3gx %s, past its bound %.3gx: %s (hack/benchguard/bounds.go)\n",
			b.Pkg, b.Bench, c.median, b.Base, b.Max, b.Why)
		status = max(status, 1)
	}
	return status
}

// runBench runs r's guarded benchmarks on one core, count rounds, and
// returns go test's output. Each round is a go test run of its own rather
// than one run with -count: -count repeats each benchmark before the next
// starts, so a round's guarded benchmark and its baseline ran up to a
// minute apart and a shared machine's load moved between them (rounds of
// 0.29-0.43 in one run); in a run of their own they are seconds apart.
func runBench(r run, count int, stderr io.Writer) ([]byte, error) {
	var all []byte
	for range count {
		cmd := exec.Command("go", "test", "./"+r.Pkg+"/", "-run", "^$", "-bench", benchRegexp(r.Pkg),
			"-benchtime", r.Benchtime, "-count", "1", "-cpu", "1")
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		cmd.Stderr = stderr
		fmt.Fprintf(stderr, "benchguard: %s\n", strings.Join(cmd.Args, " "))
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("the benchmarks of ./%s failed: %w\n%s", r.Pkg, err, out)
		}
		all = append(all, out...)
	}
	return all, nil
}

// benchRegexp is the -bench pattern that selects exactly pkg's guarded
// benchmarks and their baselines. go test matches each level of a name
// against the matching slash-separated part of the pattern, so the bounds
// of one package name sub-benchmarks of one top-level benchmark
// (TestBoundsWellFormed checks it).
func benchRegexp(pkg string) string {
	top := ""
	var subs []string
	for _, b := range bounds {
		if b.Pkg != pkg {
			continue
		}
		for _, name := range []string{b.Bench, b.Base} {
			t, sub, _ := strings.Cut(name, "/")
			top = t
			if q := regexp.QuoteMeta(sub); !slices.Contains(subs, q) {
				subs = append(subs, q)
			}
		}
	}
	return "^" + regexp.QuoteMeta(top) + "$/^(" + strings.Join(subs, "|") + ")$"
}

// result holds one benchmark's per-unit figures, one per round in the order
// go test printed them.
type result map[string][]float64

// results maps "pkg name" to a benchmark's figures.
type results map[string]result

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads go test -bench output: "pkg: <import path>" lines name the
// package of the benchmark lines that follow, each "Benchmark<name>[-P] <N>
// (<value> <unit>)...".
func parse(r io.Reader) (results, error) {
	res := results{}
	pkg := ""
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "pkg:" {
			pkg = strings.TrimPrefix(f[1], module)
			continue
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a benchmark's own log line
		}
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("line %d of the benchmark output has a value without a unit: %q", line, sc.Text())
		}
		key := pkg + " " + procSuffix.ReplaceAllString(f[0], "")
		if res[key] == nil {
			res[key] = result{}
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d of the benchmark output has %q where a number belongs", line, f[i])
			}
			res[key][f[i+1]] = append(res[key][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the benchmark output: %w", err)
	}
	return res, nil
}

// checked is one bound's outcome.
type checked struct {
	b      bound
	unit   string
	ratios []float64
	median float64
}

func (c checked) ok() bool { return c.median <= c.b.Max }

func (c checked) String() string {
	rs := make([]string, len(c.ratios))
	for i, r := range c.ratios {
		rs[i] = strconv.FormatFloat(r, 'f', 3, 64)
	}
	return fmt.Sprintf("%s %s / %s = %.3f (%s, rounds %s), bound %.3g",
		c.b.Pkg, c.b.Bench, c.b.Base, c.median, c.unit, strings.Join(rs, " "), c.b.Max)
}

// check computes b's ratio round by round: thread CPU time (cpu-ns/op)
// where both benchmarks report it, which leaves out the time another job
// held the core, else wall ns/op.
func check(res results, b bound) (checked, error) {
	num, den := res[b.Pkg+" "+b.Bench], res[b.Pkg+" "+b.Base]
	switch {
	case num == nil:
		return checked{}, fmt.Errorf("no result for %s in ./%s: was the benchmark renamed?", b.Bench, b.Pkg)
	case den == nil:
		return checked{}, fmt.Errorf("no result for %s in ./%s: was the benchmark renamed?", b.Base, b.Pkg)
	}
	unit := "ns/op"
	if len(num["cpu-ns/op"]) > 0 && len(den["cpu-ns/op"]) > 0 {
		unit = "cpu-ns/op"
	}
	n, d := num[unit], den[unit]
	if len(n) == 0 || len(d) == 0 || len(n) != len(d) {
		return checked{}, fmt.Errorf("%s and %s in ./%s have %d and %d rounds of %s: they must be measured together", b.Bench, b.Base, b.Pkg, len(n), len(d), unit)
	}
	c := checked{b: b, unit: unit}
	for i := range n {
		if d[i] <= 0 {
			return checked{}, fmt.Errorf("%s in ./%s reads %v %s: no ratio against it", b.Base, b.Pkg, d[i], unit)
		}
		c.ratios = append(c.ratios, n[i]/d[i])
	}
	s := slices.Clone(c.ratios)
	slices.Sort(s)
	if m := len(s); m%2 == 1 {
		c.median = s[m/2]
	} else {
		c.median = (s[m/2-1] + s[m/2]) / 2
	}
	return c, nil
}
