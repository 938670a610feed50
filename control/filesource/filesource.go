// Package filesource serves the EgressIP controller the same objects as the
// Kubernetes API (EgressIP, Node, Namespace, Pod) from a directory of YAML
// or JSON manifests, so the demo and the lab run the real controller with no
// cluster.
//
// Every *.yaml, *.yml and *.json file directly in the directory is read,
// each possibly holding several documents separated by "---". The
// directory is polled, so editing, adding or removing a file is seen within
// the poll interval. The controller's results go back into the directory:
//
//	status/<name>.yaml  each EgressIP with the status the controller wrote
//	events.log          one JSON object per Event (also logged)
//
// A status file is read back on start, so a restarted controller keeps its
// assignment, as it would with the API server.
//
// Only the controller, the status writer, may write or delete status files
// and events. Every other reader of the directory (the steer agent, the
// gateway agent) uses NewReadOnly: it never creates, writes or deletes
// anything there, so a manifest removed while the controller still works on
// it cannot make a reader race the controller over its status file.
package filesource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// DefaultInterval is how often the directory is checked for changes.
const DefaultInterval = 200 * time.Millisecond

// StatusDir and EventsFile are where results are written, inside the directory.
const (
	StatusDir  = "status"
	EventsFile = "events.log"
)

// maxFileSize bounds a manifest file; anything larger is refused, not read.
const maxFileSize = 16 << 20

// Source is a controller.Source over a directory.
type Source struct {
	dir      string
	interval time.Duration
	log      *slog.Logger
	readOnly bool

	// Errors counts documents that were refused (unreadable, malformed,
	// unknown kind, duplicate name); each is logged with its file.
	Errors atomic.Int64

	mu      sync.Mutex
	sigs    map[string]fileSig
	rv      uint64
	seen    map[string]time.Time // first sight of each EgressIP, for its creationTimestamp
	eips    map[string]*egressv1.EgressIP
	nodes   map[string]*corev1.Node
	nss     map[string]*corev1.Namespace
	pods    map[string]*corev1.Pod
	changed func(controller.Kind)
	events  *os.File
	listErr string // the last "cannot list" error, logged once per change
}

type fileSig struct {
	size  int64
	mtime time.Time
	ino   uint64 // a replaced file (written and renamed) has a new inode
}

// New returns a Source over dir, polled every interval (DefaultInterval if
// zero). The directory must exist.
func New(dir string, interval time.Duration, log *slog.Logger) (*Source, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("file source: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("file source: %s is not a directory", dir)
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &Source{dir: dir, interval: interval, log: log, seen: map[string]time.Time{},
		eips: map[string]*egressv1.EgressIP{}, nodes: map[string]*corev1.Node{},
		nss: map[string]*corev1.Namespace{}, pods: map[string]*corev1.Pod{}}, nil
}

// NewReadOnly is New for a process that only reads the directory (the
// steer and gateway agents): it creates, writes and deletes nothing there.
// Status files are the controller's: a removed manifest's status file is
// left for the controller to delete, UpdateEgressIP fails, and Events are
// only logged at debug level.
func NewReadOnly(dir string, interval time.Duration, log *slog.Logger) (*Source, error) {
	s, err := New(dir, interval, log)
	if err != nil {
		return nil, err
	}
	s.readOnly = true
	return s, nil
}

// ErrReadOnly is returned by UpdateEgressIP on a read-only Source.
var ErrReadOnly = errors.New("file source: read-only; only the controller writes status files")

// Start implements controller.Source: it loads the directory and polls it
// until ctx ends.
func (s *Source) Start(ctx context.Context, changed func(controller.Kind)) error {
	if !s.readOnly {
		if err := os.MkdirAll(filepath.Join(s.dir, StatusDir), 0o755); err != nil {
			return fmt.Errorf("file source: creating the status directory: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(s.dir, EventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("file source: opening the events file: %w", err)
		}
		s.mu.Lock()
		s.events = f
		s.mu.Unlock()
	}
	s.Reload()
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	go func() {
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				s.mu.Lock()
				if s.events != nil {
					s.events.Close()
				}
				s.events = nil
				s.mu.Unlock()
				return
			case <-t.C:
				s.Reload()
			}
		}
	}()
	return nil
}

// scan lists the manifest files with their size and modification time.
func (s *Source) scan() (map[string]fileSig, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	out := map[string]fileSig{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		switch filepath.Ext(name) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		sig := fileSig{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			sig.ino = st.Ino
		}
		out[name] = sig
	}
	return out, nil
}

type loaded struct {
	eips  map[string]*egressv1.EgressIP
	nodes map[string]*corev1.Node
	nss   map[string]*corev1.Namespace
	pods  map[string]*corev1.Pod
}

// Reload reads the directory again if any file changed, and reports the
// kinds whose objects changed. The poll loop calls it; tests may too.
func (s *Source) Reload() {
	sigs, err := s.scan()
	s.mu.Lock()
	last := s.listErr
	if err != nil {
		s.listErr = err.Error()
	} else {
		s.listErr = ""
	}
	s.mu.Unlock()
	if err != nil {
		// Polled every interval: say it once per change, not every poll.
		s.Errors.Add(1)
		if err.Error() != last {
			s.log.Error("file source: cannot list the directory", "dir", s.dir, "err", err)
		}
		return
	}
	if last != "" {
		s.log.Info("file source: the directory can be listed again", "dir", s.dir)
	}
	s.mu.Lock()
	same := reflect.DeepEqual(sigs, s.sigs)
	s.mu.Unlock()
	if same {
		return
	}
	names := make([]string, 0, len(sigs))
	for n := range sigs {
		names = append(names, n)
	}
	slices.Sort(names)
	l := loaded{eips: map[string]*egressv1.EgressIP{}, nodes: map[string]*corev1.Node{},
		nss: map[string]*corev1.Namespace{}, pods: map[string]*corev1.Pod{}}
	for _, n := range names {
		s.loadFile(filepath.Join(s.dir, n), &l)
	}

	s.mu.Lock()
	s.sigs = sigs
	var kinds []controller.Kind
	if s.mergeEgressIPs(l.eips) {
		kinds = append(kinds, controller.KindEgressIP)
	}
	if !reflect.DeepEqual(l.nodes, s.nodes) {
		s.nodes = l.nodes
		kinds = append(kinds, controller.KindNode)
	}
	if !reflect.DeepEqual(l.nss, s.nss) {
		s.nss = l.nss
		kinds = append(kinds, controller.KindNamespace)
	}
	if !reflect.DeepEqual(l.pods, s.pods) {
		s.pods = l.pods
		kinds = append(kinds, controller.KindPod)
	}
	changed := s.changed
	s.mu.Unlock()
	if changed != nil {
		for _, k := range kinds {
			changed(k)
		}
	}
}

func (s *Source) refuse(file string, doc int, format string, args ...any) {
	s.Errors.Add(1)
	s.log.Error("file source: document ignored", "file", file, "document", doc, "reason", fmt.Sprintf(format, args...))
}

// loadFile decodes every document of one file into l.
func (s *Source) loadFile(path string, l *loaded) {
	f, err := os.Open(path)
	if err != nil {
		s.refuse(path, 0, "cannot open: %v", err)
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		s.refuse(path, 0, "cannot read: %v", err)
		return
	}
	if len(b) > maxFileSize {
		s.refuse(path, 0, "larger than %d bytes", maxFileSize)
		return
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if !errors.Is(err, io.EOF) {
				// The decoder cannot resynchronise after a syntax error.
				s.refuse(path, doc, "not valid YAML or JSON (the rest of the file is skipped): %v", err)
			}
			return
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue // an empty document between "---" lines
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw, &tm); err != nil {
			s.refuse(path, doc, "not an object: %v", err)
			continue
		}
		switch {
		case tm.APIVersion == egressv1.SchemeGroupVersion.String() && tm.Kind == egressv1.Kind:
			e := &egressv1.EgressIP{}
			if err := strictUnmarshal(raw, e); err != nil {
				s.refuse(path, doc, "EgressIP does not decode: %v", err)
				continue
			}
			if e.Name == "" {
				s.refuse(path, doc, "EgressIP has no metadata.name")
				continue
			}
			if err := e.Validate(); err != nil {
				// Still used: the controller reports bad IPs as InvalidEgressIP Events.
				s.log.Warn("file source: EgressIP has problems", "file", path, "err", err)
			}
			if _, dup := l.eips[e.Name]; dup {
				s.refuse(path, doc, "EgressIP %q is defined twice; the first definition is used", e.Name)
				continue
			}
			l.eips[e.Name] = e
		case tm.APIVersion == "v1" && tm.Kind == "Node":
			n := &corev1.Node{}
			if !s.decodeCore(path, doc, raw, n, &n.ObjectMeta, false) {
				continue
			}
			if _, dup := l.nodes[n.Name]; dup {
				s.refuse(path, doc, "Node %q is defined twice; the first definition is used", n.Name)
				continue
			}
			// No kubelet reports readiness here: a node without a Ready
			// condition is Ready; write one with status False to take it down.
			if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady }) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue})
			}
			l.nodes[n.Name] = n
		case tm.APIVersion == "v1" && tm.Kind == "Namespace":
			ns := &corev1.Namespace{}
			if !s.decodeCore(path, doc, raw, ns, &ns.ObjectMeta, false) {
				continue
			}
			if _, dup := l.nss[ns.Name]; dup {
				s.refuse(path, doc, "Namespace %q is defined twice; the first definition is used", ns.Name)
				continue
			}
			l.nss[ns.Name] = ns
		case tm.APIVersion == "v1" && tm.Kind == "Pod":
			p := &corev1.Pod{}
			if !s.decodeCore(path, doc, raw, p, &p.ObjectMeta, true) {
				continue
			}
			key := p.Namespace + "/" + p.Name
			if _, dup := l.pods[key]; dup {
				s.refuse(path, doc, "Pod %s is defined twice; the first definition is used", key)
				continue
			}
			l.pods[key] = p
		default:
			s.refuse(path, doc, "kind %q of apiVersion %q is not one the controller reads (EgressIP k8s.ovn.org/v1, Node, Namespace, Pod v1)", tm.Kind, tm.APIVersion)
		}
	}
}

func strictUnmarshal(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func (s *Source) decodeCore(path string, doc int, raw []byte, v any, meta *metav1.ObjectMeta, namespaced bool) bool {
	if err := json.Unmarshal(raw, v); err != nil {
		s.refuse(path, doc, "does not decode: %v", err)
		return false
	}
	if meta.Name == "" {
		s.refuse(path, doc, "has no metadata.name")
		return false
	}
	if namespaced && meta.Namespace == "" {
		meta.Namespace = metav1.NamespaceDefault
	}
	if meta.UID == "" {
		meta.UID = types.UID("file-" + meta.Namespace + "-" + meta.Name)
	}
	return true
}

// mergeEgressIPs installs the loaded EgressIPs, keeping the status and
// resourceVersion of unchanged ones; it reports whether anything changed.
// The caller holds s.mu.
func (s *Source) mergeEgressIPs(in map[string]*egressv1.EgressIP) bool {
	changed := false
	for name := range s.eips {
		if _, ok := in[name]; !ok {
			delete(s.eips, name)
			delete(s.seen, name)
			if !s.readOnly {
				os.Remove(s.statusPath(name)) // the status writer's file
			}
			changed = true
		}
	}
	for name, e := range in {
		if _, ok := s.seen[name]; !ok {
			s.seen[name] = time.Now()
		}
		if e.CreationTimestamp.IsZero() {
			e.CreationTimestamp = metav1.NewTime(s.seen[name].Truncate(time.Second))
		}
		if e.UID == "" {
			e.UID = types.UID("file-" + name)
		}
		old, ok := s.eips[name]
		if ok {
			if reflect.DeepEqual(old.Spec, e.Spec) && reflect.DeepEqual(old.ObjectMeta.Labels, e.ObjectMeta.Labels) {
				continue
			}
			e.Status = old.Status // the controller owns status
		} else if st, ok := s.readStatus(name); ok {
			e.Status = st
		}
		s.rv++
		e.ResourceVersion = strconv.FormatUint(s.rv, 10)
		s.eips[name] = e
		changed = true
	}
	return changed
}

func (s *Source) statusPath(name string) string {
	return filepath.Join(s.dir, StatusDir, name+".yaml")
}

// readStatus reads the status a previous run wrote, if any.
func (s *Source) readStatus(name string) (egressv1.EgressIPStatus, bool) {
	st, err := ReadStatus(filepath.Join(s.dir, StatusDir), name)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("file source: ignoring an unreadable status file", "file", s.statusPath(name), "err", err)
		}
		return egressv1.EgressIPStatus{}, false
	}
	return st, true
}

// ReadStatus reads the status file of EgressIP name in statusDir (a
// directory's StatusDir folder). A missing file is an os.ErrNotExist error.
func ReadStatus(statusDir, name string) (egressv1.EgressIPStatus, error) {
	b, err := os.ReadFile(filepath.Join(statusDir, name+".yaml"))
	if err != nil {
		return egressv1.EgressIPStatus{}, fmt.Errorf("file source: status of %s: %w", name, err)
	}
	var e egressv1.EgressIP
	if err := yaml.Unmarshal(b, &e); err != nil {
		return egressv1.EgressIPStatus{}, fmt.Errorf("file source: status of %s: %w", name, err)
	}
	return e.Status, nil
}

// ReadStatuses reads every <name>.yaml status file the controller wrote
// into statusDir, by EgressIP name, for a reader in another process (the
// gateway agent). Any unreadable or unparsable file is an error; a file
// removed while the folder is read is skipped.
func ReadStatuses(statusDir string) (map[string]egressv1.EgressIPStatus, error) {
	entries, err := os.ReadDir(statusDir)
	if err != nil {
		return nil, fmt.Errorf("file source: status folder: %w", err)
	}
	out := map[string]egressv1.EgressIPStatus{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if e.IsDir() || !ok || name == "" || strings.HasPrefix(name, ".") {
			continue
		}
		st, err := ReadStatus(statusDir, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced or removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[name] = st
	}
	return out, nil
}

func sorted[T any](m map[string]*T) []*T {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*T, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// EgressIPs implements controller.Source.
func (s *Source) EgressIPs() []*egressv1.EgressIP {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sorted(s.eips)
}

// EgressIP implements controller.Source.
func (s *Source) EgressIP(name string) (*egressv1.EgressIP, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.eips[name]
	return e, ok
}

// Nodes implements controller.Source.
func (s *Source) Nodes() []*corev1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sorted(s.nodes)
}

// Namespaces implements controller.Source.
func (s *Source) Namespaces() []*corev1.Namespace {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sorted(s.nss)
}

// Pods implements controller.Source.
func (s *Source) Pods() []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sorted(s.pods)
}

var egressIPResource = egressv1.SchemeGroupVersion.WithResource(egressv1.Resource).GroupResource()

// UpdateEgressIP implements controller.Source: only the status is taken
// (the manifest files are the user's), with the API server's conflict rule.
func (s *Source) UpdateEgressIP(_ context.Context, eip *egressv1.EgressIP) error {
	if s.readOnly {
		return ErrReadOnly
	}
	s.mu.Lock()
	cur, ok := s.eips[eip.Name]
	if !ok {
		s.mu.Unlock()
		return apierrors.NewNotFound(egressIPResource, eip.Name)
	}
	if cur.ResourceVersion != eip.ResourceVersion {
		s.mu.Unlock()
		return apierrors.NewConflict(egressIPResource, eip.Name,
			fmt.Errorf("the object has been modified (resourceVersion %s, now %s); please apply your changes to the latest version and try again", eip.ResourceVersion, cur.ResourceVersion))
	}
	next := cur.DeepCopy()
	next.Status = *eip.Status.DeepCopy()
	s.rv++
	next.ResourceVersion = strconv.FormatUint(s.rv, 10)
	out := next.DeepCopy()
	out.TypeMeta = metav1.TypeMeta{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind}
	out.ResourceVersion, out.UID, out.CreationTimestamp = "", "", metav1.Time{}
	b, err := yaml.Marshal(out)
	if err == nil {
		err = writeAtomic(s.statusPath(eip.Name), b)
	}
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("file source: writing the status of %s: %w", eip.Name, err)
	}
	s.eips[eip.Name] = next
	changed := s.changed
	s.mu.Unlock()
	if changed != nil {
		changed(controller.KindEgressIP)
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// eventLine is one line of events.log.
type eventLine struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// Event implements controller.Source: the Event is appended to events.log
// (the controller logs it too).
func (s *Source) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
	if s.readOnly {
		s.log.Debug("file source: event not recorded (read-only)", "kind", ref.Kind, "name", ref.Name, "reason", reason, "message", message)
		return
	}
	b, err := json.Marshal(eventLine{Time: time.Now().UTC(), Type: eventType, Kind: ref.Kind, Name: ref.Name, Reason: reason, Message: message})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		return
	}
	if _, err := s.events.Write(append(b, '\n')); err != nil {
		s.log.Error("file source: writing the events file", "err", err)
	}
}

// ReadEvents parses an events.log, for tests and tools.
func ReadEvents(path string) ([]EventRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []EventRecord
	for i, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e eventLine
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, EventRecord(e))
	}
	return out, nil
}

// EventRecord is one Event read back from events.log.
type EventRecord struct {
	Time    time.Time
	Type    string
	Kind    string
	Name    string
	Reason  string
	Message string
}
