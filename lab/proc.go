package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startDaemon starts name+args inside namespace ns as a session leader that
// outlives the caller, with its output in <dir>/<id>.log and its pid in
// <dir>/<id>.pid.
func startDaemon(dir, id, ns, name string, args ...string) (int, error) {
	// `ip netns exec` execs the command in place, so the pid is the daemon's.
	return spawn(dir, id, name+" in "+ns, append([]string{"ip", "netns", "exec", ns, name}, args...))
}

// startGatewayDaemon is startDaemon for an `egret gateway`: it enters only
// the network namespace (nsenter, which also execs in place), so the
// gateway sees the host's /sys/fs/bpf as in its DaemonSet (a hostPath) and
// pins its XDP program where its next process finds it. `ip netns exec`
// mounts a fresh /sys, and the bpffs the gateway would mount there dies
// with it: a restarted gateway could never take its program over.
func startGatewayDaemon(dir, id, ns, name string, args ...string) (int, error) {
	return spawn(dir, id, name+" in "+ns, append([]string{"nsenter", "--net=/run/netns/" + ns, "--", name}, args...))
}

// spawn runs argv as a session leader with its output in <dir>/<id>.log
// and its pid in <dir>/<id>.pid; what names it in errors.
func spawn(dir, id, what string, argv []string) (int, error) {
	logf, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", what, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while we run; when we exit first, init adopts it.
	go cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, id+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return 0, err
	}
	return pid, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// readPid reads a pid file; 0 when missing or unreadable.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// tail returns the last lines of a log file for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = "..." + s[len(s)-600:]
	}
	return s
}

// nsInode identifies a network namespace file (a /run/netns entry or a
// /proc/<pid>/ns/net link).
type nsInode struct{ dev, ino uint64 }

func statNS(path string) (nsInode, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsInode{}, false
	}
	return nsInode{uint64(st.Dev), st.Ino}, true
}

// pidsInNamespaces lists the processes whose network namespace is one of
// nsPaths, except this process.
func pidsInNamespaces(nsPaths []string) []int {
	want := map[nsInode]bool{}
	for _, p := range nsPaths {
		if id, ok := statNS(p); ok {
			want[id] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if id, ok := statNS(fmt.Sprintf("/proc/%d/ns/net", pid)); ok && want[id] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll sends SIGTERM to pids, waits up to grace, then SIGKILLs what is
// left and waits for it to go. It reports processes that would not die.
func killAll(pids []int, grace time.Duration) error {
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGTERM)
	}
	wait := func(d time.Duration) []int {
		deadline := time.Now().Add(d)
		for {
			var left []int
			for _, p := range pids {
				if alive(p) {
					left = append(left, p)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				return left
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	left := wait(grace)
	for _, p := range left {
		syscall.Kill(p, syscall.SIGKILL)
	}
	if left = wait(2 * time.Second); len(left) > 0 {
		return fmt.Errorf("processes %v did not exit after SIGKILL", left)
	}
	return nil
}

var errNotUp = errors.New("lab is not up")
