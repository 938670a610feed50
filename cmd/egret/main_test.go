package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestMain runs main instead of the tests when a test re-executes this
// binary as egret.
func TestMain(m *testing.M) {
	if os.Getenv("EGRET_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"egret"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// egret runs this binary as egret with args and returns its stdout, stderr
// and exit status.
func egret(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "EGRET_TEST_RUN_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("egret %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// subcommands lists every subcommand as its command line: "gateway", "lab up".
func subcommands() []string {
	var names []string
	for n := range commands {
		if n != "lab" {
			names = append(names, n)
		}
	}
	for _, c := range labCommands {
		names = append(names, "lab "+c.name)
	}
	names = append(names, "status pods")
	sort.Strings(names)
	return names
}

var flagLine = regexp.MustCompile(`^  -(\S+)`)
var kebab = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// TestSubcommandFlagStyle checks that every subcommand handles -h and a
// flag it does not know the same way, and names its flags in kebab-case.
func TestSubcommandFlagStyle(t *testing.T) {
	for _, name := range subcommands() {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			args := strings.Fields(name)

			out, errOut, code := egret(t, append(args, "-h")...)
			if code != 0 || out != "" {
				t.Errorf("-h: exit %d, stdout %q; want 0 and the usage on stderr", code, out)
			}
			if want := "usage: egret " + name + " [flags]\n\n" + summary(name) + "\n\n"; !strings.HasPrefix(errOut, want) {
				t.Errorf("-h printed\n%s\nwant it to start with\n%s", errOut, want)
			}
			if !strings.Contains(errOut, "\nflags:\n") && !strings.Contains(errOut, "It takes no flags.") {
				t.Errorf("-h lists no flags:\n%s", errOut)
			}
			for _, line := range strings.Split(errOut, "\n") {
				if m := flagLine.FindStringSubmatch(line); m != nil && !kebab.MatchString(m[1]) {
					t.Errorf("flag -%s is not kebab-case", m[1])
				}
			}

			out, errOut, code = egret(t, append(args, "--no-such-flag")...)
			want := "egret " + name + ": flag provided but not defined: -no-such-flag (see egret " + name + " -h)\n"
			if code != 2 || out != "" || errOut != want {
				t.Errorf("unknown flag: exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
			}
		})
	}
}

// TestLongRunningLogFlags checks that the long-running subcommands all take
// --log-format and --log-level.
func TestLongRunningLogFlags(t *testing.T) {
	for _, name := range []string{"controller", "gateway", "steer", "lab echo-server"} {
		_, usage, _ := egret(t, append(strings.Fields(name), "-h")...)
		for _, f := range []string{"  -log-format string\n", "  -log-level string\n"} {
			if !strings.Contains(usage, f) {
				t.Errorf("egret %s has no %s", name, strings.TrimSpace(f))
			}
		}
	}
}

func TestNewLogger(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		ok            bool
	}{
		{"", "", true}, {"text", "info", true}, {"json", "debug", true}, {"json", "WARN", true},
		{"xml", "", false}, {"", "loud", false},
	} {
		_, err := newLogger(tc.format, tc.level)
		if (err == nil) != tc.ok {
			t.Errorf("newLogger(%q, %q) = %v, want ok %v", tc.format, tc.level, err, tc.ok)
		}
	}
}
