package natlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/conntrack"
)

// Defaults of Config's zero fields.
const (
	DefaultRingSize = 1 << 14
	DefaultMaxBytes = 100 << 20
	DefaultMaxFiles = 10
	DefaultEvery    = 100 * time.Millisecond
)

// Config configures a Log.
type Config struct {
	// Dir is where the JSON lines go (rotated files, see rotate.go); ""
	// writes no files.
	Dir string
	// MaxBytes bounds one file; MaxFiles the files kept (the current one
	// included); MaxAge, if set, removes rotated files older than it.
	MaxBytes int64
	MaxFiles int
	MaxAge   time.Duration
	// IPFIX, if set, is the host:port of an IPFIX collector (UDP) that gets
	// every record as an RFC 8158 NAT event.
	IPFIX string
	// Gateway is this gateway's node name, written in every record.
	Gateway string
	// RingSize is the records each worker's ring holds (DefaultRingSize).
	RingSize int
	// Every is how often the writer drains the rings (DefaultEvery): how
	// late a record reaches the file at most, give or take a write.
	Every time.Duration
	// Clock is the monotonic clock the records' Mono were read from (the
	// pipeline's); Now the wall clock. Defaults: time since the Log was
	// made, time.Now.
	Clock func() int64
	Now   func() time.Time
	// Logger reports write errors (rate-limited to one per minute).
	Logger *slog.Logger
}

// Log is a NAT log: rings the workers fill and the writer that drains them.
type Log struct {
	cfg   Config
	pods  atomic.Pointer[Pods]
	files *rotator
	ipfix *exporter

	mu    sync.Mutex // guards rings
	rings []*Ring

	ctlMu sync.Mutex // serialises control-path pushes into ctl
	ctl   *Ring

	written  atomic.Uint64
	failed   atomic.Uint64
	lastWarn time.Time
	line     []byte
	// tail ends every line: the gateway's field, rendered once.
	tail []byte
	// sec and secText are the last second a line was stamped with and
	// its text up to the seconds: records come in bursts of one second.
	sec     int64
	secText []byte
}

// Stats are a Log's counters.
type Stats struct {
	// Written is records written (to the files, else to the collector).
	Written uint64
	// Dropped is records lost because a ring was full.
	Dropped uint64
	// Failed is records that a write error lost.
	Failed uint64
}

// New opens the log's current file in cfg.Dir (creating the directory) and
// the IPFIX socket; Run writes.
func New(cfg Config) (*Log, error) {
	if cfg.Dir == "" && cfg.IPFIX == "" {
		return nil, errors.New("natlog: neither a directory nor an IPFIX collector")
	}
	if cfg.RingSize <= 0 {
		cfg.RingSize = DefaultRingSize
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Clock == nil {
		start := time.Now()
		cfg.Clock = func() int64 { return int64(time.Since(start)) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Log{cfg: cfg, ctl: newRing(cfg.RingSize), sec: -1}
	l.tail = append(appendString(nil, "gateway", cfg.Gateway), "}\n"...)
	l.rings = []*Ring{l.ctl}
	if cfg.Dir != "" {
		r, err := openRotator(cfg.Dir, cfg.MaxBytes, cfg.MaxFiles, cfg.MaxAge, cfg.Now)
		if err != nil {
			return nil, err
		}
		l.files = r
	}
	if cfg.IPFIX != "" {
		x, err := dialExporter(cfg.IPFIX)
		if err != nil {
			if l.files != nil {
				l.files.close()
			}
			return nil, err
		}
		l.ipfix = x
	}
	return l, nil
}

// NewRing returns a ring for one worker, drained by this log's writer.
func (l *Log) NewRing() *Ring {
	r := newRing(l.cfg.RingSize)
	l.mu.Lock()
	l.rings = append(l.rings, r)
	l.mu.Unlock()
	return r
}

// Push records an event of the control path (flow sync, state file), from
// any goroutine; like a worker's, a full ring drops it and counts it.
func (l *Log) Push(ev Event, f *conntrack.Flow) {
	r := Record{Mono: l.cfg.Clock(), Flow: *f, Event: ev}
	l.ctlMu.Lock()
	l.ctl.Push(&r)
	l.ctlMu.Unlock()
}

// SetPods replaces the table that names the pods behind pod addresses.
func (l *Log) SetPods(t *Pods) { l.pods.Store(t) }

// Stats reads the counters; safe from any goroutine.
func (l *Log) Stats() Stats {
	s := Stats{Written: l.written.Load(), Failed: l.failed.Load()}
	l.mu.Lock()
	for _, r := range l.rings {
		s.Dropped += r.Dropped()
	}
	l.mu.Unlock()
	return s
}

// ThreadName names the writer's thread (`ps -T`, /proc/PID/task/TID/comm).
// The writer formats and writes every record (about 300 ns of CPU each,
// docs/natlog.md): at a high connection rate that is a share of a core,
// which belongs on a core the workers do not use. The thread stays the
// writer's for its whole run, so an operator (taskset, a cpuset) or the
// bench lab can place it apart from the workers and read its CPU apart.
const ThreadName = "egret-natlog"

// Run drains the rings every Config.Every until ctx ends, then once more,
// and closes the files and the socket. A drain that found a ring a quarter
// full is followed by another at once: at a high connection rate a ring
// would fill between ticks. Run keeps its OS thread, named ThreadName, to
// itself; the thread ends with it.
func (l *Log) Run(ctx context.Context) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread, whose name is the process's own
		// (ps, top) and which the runtime never ends: hold it while
		// another goroutine, which then cannot get it, does the work.
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Run(ctx)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	// Never unlocked: the runtime ends a thread whose goroutine exits
	// locked, so no other goroutine ever runs under the writer's name or
	// placement.
	nameThread(ThreadName)
	t := time.NewTicker(l.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Flush()
			l.close()
			return
		case <-t.C:
			for l.Flush() >= l.cfg.RingSize/4 && ctx.Err() == nil {
			}
		}
	}
}

// Flush writes every record pushed so far and returns the most it took
// from one ring. Only the writer calls it (Run does); tests call it instead
// of Run.
func (l *Log) Flush() int {
	l.mu.Lock()
	rings := l.rings
	l.mu.Unlock()
	// Wall time of a record: now minus its age on the monotonic clock, so
	// a step of the wall clock does not reorder records.
	wall, mono := l.cfg.Now(), l.cfg.Clock()
	pods := l.pods.Load()
	most := 0
	for _, r := range rings {
		most = max(most, r.drain(func(rec *Record) {
			at := wall.Add(-time.Duration(mono - rec.Mono))
			l.write(rec, at, pods)
		}))
	}
	if l.files != nil {
		if err := l.files.flush(); err != nil {
			l.warn(err)
		}
	}
	if l.ipfix != nil {
		if err := l.ipfix.send(); err != nil {
			l.warn(err)
		}
	}
	return most
}

func (l *Log) write(rec *Record, at time.Time, pods *Pods) {
	ok := true
	if l.files != nil {
		l.line = l.appendJSON(l.line[:0], rec, at, pods.lookup16(rec.Flow.Orig.Src))
		if err := l.files.write(l.line, at); err != nil {
			ok = false
			l.warn(err)
		}
	}
	if l.ipfix != nil {
		if err := l.ipfix.add(rec, at); err != nil && l.files == nil {
			ok = false
			l.warn(err)
		}
	}
	if ok {
		l.written.Add(1)
	} else {
		l.failed.Add(1)
	}
}

// nameThread names the calling thread; a name the kernel refuses only costs
// the name (comm holds 15 bytes).
func nameThread(name string) {
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

func (l *Log) warn(err error) {
	if now := l.cfg.Now(); now.Sub(l.lastWarn) >= time.Minute {
		l.lastWarn = now
		l.cfg.Logger.Warn("NAT log: records lost", "error", err)
	}
}

func (l *Log) close() {
	if l.files != nil {
		if err := l.files.close(); err != nil {
			l.warn(err)
		}
	}
	if l.ipfix != nil {
		l.ipfix.close()
	}
}

// Entry is one line of the log file.
type Entry struct {
	Event      string    `json:"event"`
	Time       time.Time `json:"time"`
	Protocol   string    `json:"protocol"`
	Namespace  string    `json:"namespace,omitempty"`
	Pod        string    `json:"pod,omitempty"`
	PodUID     string    `json:"podUID,omitempty"`
	PodIP      string    `json:"podIP"`
	PodPort    uint16    `json:"podPort"`
	EgressIP   string    `json:"egressIP"`
	EgressPort uint16    `json:"egressPort"`
	DstIP      string    `json:"dstIP"`
	DstPort    uint16    `json:"dstPort"`
	Gateway    string    `json:"gateway"`
}

// appendJSON appends rec's line; it builds what json.Marshal of an Entry
// would (a test checks), without its reflection per record: the pod's and
// the gateway's fields are rendered once, the time's date and clock once a
// second.
func (l *Log) appendJSON(b []byte, rec *Record, at time.Time, pod namedPod) []byte {
	o := &rec.Flow.Orig
	b = append(b, `{"event":"`...)
	b = append(b, rec.Event.String()...)
	b = append(b, `","time":"`...)
	b = l.appendTime(b, at)
	b = append(b, `","protocol":"`...)
	b = append(b, protoName(o.Proto)...)
	b = append(b, '"')
	b = append(b, pod.json...)
	b = appendAddrPort(b, "podIP", "podPort", addr(o.Src), o.SrcPort)
	b = appendAddrPort(b, "egressIP", "egressPort", addr(rec.Flow.NATAddr), rec.Flow.NATPort)
	b = appendAddrPort(b, "dstIP", "dstPort", addr(o.Dst), o.DstPort)
	return append(b, l.tail...)
}

// appendTime appends at in UTC as time.RFC3339Nano does (the fraction
// without trailing zeros, none for a whole second).
func (l *Log) appendTime(b []byte, at time.Time) []byte {
	at = at.UTC()
	if sec := at.Unix(); sec != l.sec {
		l.sec, l.secText = sec, at.AppendFormat(l.secText[:0], "2006-01-02T15:04:05")
	}
	b = append(b, l.secText...)
	if ns := at.Nanosecond(); ns != 0 {
		var d [10]byte
		d[0] = '.'
		for i := 9; i >= 1; i-- {
			d[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return append(b, 'Z')
}

// appendString appends ,"k":v with v quoted as encoding/json quotes it; it
// is for the fields rendered once, not per record.
func appendString(b []byte, k, v string) []byte {
	q, _ := json.Marshal(v) // a string always marshals
	b = append(b, `,"`...)
	b = append(b, k...)
	b = append(b, `":`...)
	return append(b, q...)
}

func appendAddrPort(b []byte, ka, kp string, a netip.Addr, p uint16) []byte {
	b = append(b, `,"`...)
	b = append(b, ka...)
	b = append(b, `":"`...)
	b = a.AppendTo(b)
	b = append(b, `","`...)
	b = append(b, kp...)
	b = append(b, `":`...)
	return strconv.AppendUint(b, uint64(p), 10)
}

// parseEntry reads one line.
func parseEntry(line []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil {
		return e, fmt.Errorf("not a NAT log line: %w", err)
	}
	return e, nil
}
