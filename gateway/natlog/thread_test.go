package natlog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/internal/nstest"
)

// countNamed is the threads of this process whose name is ThreadName.
func countNamed() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == ThreadName {
			n++
		}
	}
	return n
}

// TestRunOnItsOwnNamedThread: the writer runs on one thread named
// ThreadName, which is how the bench lab (and an operator) keeps it off
// the workers' cores, and the thread ends with Run, so no other goroutine
// ever inherits its name and placement.
func TestRunOnItsOwnNamedThread(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Config{Dir: dir, Gateway: "gw-a", Every: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n := countNamed(); n != 0 {
		t.Fatalf("%d threads named %s before Run", n, ThreadName)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	f := flow("10.244.1.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
	l.Push(EventCreate, &f)
	nstest.Eventually(t, "the writer wrote the record", 10*time.Second, func() bool { return l.Stats().Written == 1 })
	if n := countNamed(); n != 1 {
		t.Fatalf("%d threads named %s while Run writes, want 1", n, ThreadName)
	}
	if now, _ := os.ReadFile("/proc/self/comm"); string(now) != string(comm) {
		t.Fatalf("the process (its main thread) is named %q while Run writes, was %q", now, comm)
	}
	cancel()
	<-done
	nstest.Eventually(t, "the writer's thread ended with Run", 10*time.Second, func() bool { return countNamed() == 0 })
}

// The main goroutine stays on the process's main thread (init runs on it),
// so that TestMain can call Run there: the case where naming the thread
// would rename the process.
func init() { runtime.LockOSThread() }

// fromMain is what Run did when TestMain called it on the main thread.
var fromMain struct {
	err            error
	comm, commThen string
	named, written int
}

func TestMain(m *testing.M) {
	runFromMainThread()
	os.Exit(m.Run())
}

func runFromMainThread() {
	if unix.Gettid() != unix.Getpid() {
		fromMain.err = fmt.Errorf("TestMain runs on thread %d, not the main thread %d", unix.Gettid(), unix.Getpid())
		return
	}
	dir, err := os.MkdirTemp("", "natlog-main")
	if err != nil {
		fromMain.err = err
		return
	}
	defer os.RemoveAll(dir)
	l, err := New(Config{Dir: dir, Gateway: "gw-a", Every: 5 * time.Millisecond})
	if err != nil {
		fromMain.err = err
		return
	}
	b, _ := os.ReadFile("/proc/self/comm")
	fromMain.comm = string(b)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		f := flow("10.244.1.5:40000", "192.0.2.101:40123", "198.51.100.7:443", conntrack.ProtoTCP)
		l.Push(EventCreate, &f)
		nstest.Soon(10*time.Second, func() bool { return l.Stats().Written == 1 })
		fromMain.written = int(l.Stats().Written)
		b, _ := os.ReadFile("/proc/self/comm")
		fromMain.commThen = string(b)
		fromMain.named = countNamed()
	}()
	l.Run(ctx)
}

// TestRunFromTheMainThread: called on the process's main thread, Run
// writes from another thread and leaves the process's name alone.
func TestRunFromTheMainThread(t *testing.T) {
	if fromMain.err != nil {
		t.Fatal(fromMain.err)
	}
	if fromMain.written != 1 {
		t.Fatalf("Run on the main thread wrote %d records, want 1", fromMain.written)
	}
	if fromMain.commThen != fromMain.comm {
		t.Fatalf("the process was renamed %q while Run wrote, was %q", fromMain.commThen, fromMain.comm)
	}
	if fromMain.named != 1 {
		t.Fatalf("%d threads named %s while Run wrote, want 1", fromMain.named, ThreadName)
	}
}
