package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
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

// Dir is a Source over a directory of YAML or JSON manifests, so the demo
// and the lab run the real roles with no cluster.
//
// Every *.yaml, *.yml and *.json file directly in the directory is read,
// each possibly holding several documents separated by "---". The
// directory is polled, so editing, adding or removing a file is seen within
// the poll interval. The controller's results go back into the directory:
//
//	status/<name>.yaml  each EgressIP with the status the controller wrote
//	status/egressiptraffics/<name>.yaml
//	                    each EgressIPTraffic's status (resolved DNS names)
//	events.log          one JSON object per Event (also logged)
//
// A status file is read back on start, so a restarted controller keeps its
// assignment, as it would with the API server.
//
// Only the controller, the status writer, may write or delete status files
// and events (NewDir). Every other reader of the directory (the steer
// agent, the gateway agent, the lab) uses NewDirReader: it never creates,
// writes or deletes anything there, so a manifest removed while the
// controller still works on it cannot make a reader race the controller
// over its status file; and it follows the status files the controller in
// another process writes, polled with the manifests.
//
// Contact (Check) is defined as: the status folder can be listed and every
// status/*.yaml file can be read and parsed. Status files change only when
// assignments change, so their age says nothing about the controller; a
// directory that disappears, cannot be read or holds a corrupt status file
// is a lost contact.
type Dir struct {
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
	traffic map[string]*egressv1.EgressIPTraffic
	changed func(Kind)
	events  *os.File
	listErr string // the last "cannot list" error, logged once per change
	// status is the last good read of the status files (NewDirReader),
	// laid over the manifests' status in View, with the egret.io/standby
	// annotation the controller wrote beside each status.
	status   Statuses
	standbys map[string]string
	// trafficStatus is, for a reader, the last read of the EgressIPTraffic
	// status files, laid over the manifests' objects in View.
	trafficStatus map[string]egressv1.EgressIPTrafficStatus
	trafficErr    string // the last error reading them, logged once per change
	// good is, per file, its last load without a refused document.
	good map[string]loaded
}

type fileSig struct {
	size  int64
	mtime time.Time
	ino   uint64 // a replaced file (written and renamed) has a new inode
}

// NewDir returns the controller's Dir over dir, polled every interval
// (DefaultInterval if zero). The directory must exist.
func NewDir(dir string, interval time.Duration, log *slog.Logger) (*Dir, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("object directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("object directory %s is not a directory", dir)
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &Dir{dir: dir, interval: interval, log: log, seen: map[string]time.Time{},
		eips: map[string]*egressv1.EgressIP{}, nodes: map[string]*corev1.Node{},
		nss: map[string]*corev1.Namespace{}, pods: map[string]*corev1.Pod{},
		traffic: map[string]*egressv1.EgressIPTraffic{}}, nil
}

// NewDirReader is NewDir for a process that only reads the directory (the
// steer and gateway agents, the lab): it creates, writes and deletes
// nothing there. Status files are the controller's: a removed manifest's
// status file is left for the controller to delete, UpdateEgressIP fails,
// and Events are only logged at debug level. The status files are read
// with every poll, and View gives each EgressIP the status its file holds.
func NewDirReader(dir string, interval time.Duration, log *slog.Logger) (*Dir, error) {
	s, err := NewDir(dir, interval, log)
	if err != nil {
		return nil, err
	}
	s.readOnly = true
	return s, nil
}

// ErrReadOnly is returned by UpdateEgressIP on a read-only Source.
var ErrReadOnly = errors.New("the object directory is read-only here: only the controller writes status files")

// Start implements Source: it loads the directory and polls it until ctx
// ends. A reader also reads the status files; their folder may not exist
// yet (only the controller creates it).
func (s *Dir) Start(ctx context.Context, changed func(Kind)) error {
	if !s.readOnly {
		if err := os.MkdirAll(filepath.Join(s.dir, StatusDir), 0o755); err != nil {
			return fmt.Errorf("creating the status directory: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(s.dir, EventsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("opening the events file: %w", err)
		}
		s.mu.Lock()
		s.events = f
		s.mu.Unlock()
	}
	s.Reload()
	if s.readOnly {
		s.readTrafficStatus()
		if _, err := s.Check(ctx); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return err
			}
			// No controller has written a status yet: not fatal, but no
			// contact either (a gateway fences if the folder does not
			// appear within its fence time).
			s.log.Warn("file source: no status folder yet; waiting for the controller to write one", "dir", filepath.Join(s.dir, StatusDir))
		}
	}
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
				if s.readOnly {
					s.readTrafficStatus()
					s.Check(ctx) // a failure shows in the agents' own checks
				}
			}
		}
	}()
	return nil
}

// scan lists the manifest files with their size and modification time.
func (s *Dir) scan() (map[string]fileSig, error) {
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
	// traffic are the EgressIPTraffic objects, status left out (it is the
	// controller's, kept in the status files).
	traffic map[string]*egressv1.EgressIPTraffic
	// doc is each object's document number in its file ("Kind/name"),
	// for the message that refuses a second definition in a later file.
	doc map[string]int
}

func newLoaded() loaded {
	return loaded{eips: map[string]*egressv1.EgressIP{}, nodes: map[string]*corev1.Node{},
		nss: map[string]*corev1.Namespace{}, pods: map[string]*corev1.Pod{},
		traffic: map[string]*egressv1.EgressIPTraffic{}, doc: map[string]int{}}
}

// copy is a deep copy: a file's last good objects are kept apart from the
// ones handed on, which the status writer and mergeEgressIPs fill in.
func (l loaded) copy() loaded {
	c := newLoaded()
	copyAll(c.eips, l.eips, (*egressv1.EgressIP).DeepCopy)
	copyAll(c.nodes, l.nodes, (*corev1.Node).DeepCopy)
	copyAll(c.nss, l.nss, (*corev1.Namespace).DeepCopy)
	copyAll(c.pods, l.pods, (*corev1.Pod).DeepCopy)
	copyAll(c.traffic, l.traffic, (*egressv1.EgressIPTraffic).DeepCopy)
	maps.Copy(c.doc, l.doc)
	return c
}

func copyAll[T any](dst, src map[string]T, deep func(T) T) {
	for k, v := range src {
		dst[k] = deep(v)
	}
}

// add merges one file's objects into l; an object a file before it
// defined already is refused.
func (s *Dir) add(l *loaded, path string, f loaded) {
	dup := func(kind string) func(name string) {
		return func(name string) {
			s.refuse(path, f.doc[kind+"/"+name], "%s %q is defined twice; the first definition (an earlier file) is used", kind, name)
		}
	}
	addAll(l.eips, f.eips, dup("EgressIP"))
	addAll(l.nodes, f.nodes, dup("Node"))
	addAll(l.nss, f.nss, dup("Namespace"))
	addAll(l.pods, f.pods, dup("Pod"))
	addAll(l.traffic, f.traffic, dup(egressv1.TrafficKind))
}

func addAll[T any](dst, src map[string]T, dup func(name string)) {
	for k, v := range src {
		if _, ok := dst[k]; ok {
			dup(k)
			continue
		}
		dst[k] = v
	}
}

// Reload reads the directory again if any file changed, and reports the
// kinds whose objects changed. The poll loop calls it; tests may too.
func (s *Dir) Reload() {
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
	s.mu.Lock()
	lastGood := s.good
	s.mu.Unlock()
	l, good := newLoaded(), map[string]loaded{}
	for _, n := range names {
		path := filepath.Join(s.dir, n)
		f, bad := s.loadFile(path)
		if bad == 0 {
			good[n] = f.copy()
		} else if prev, ok := lastGood[n]; ok {
			// A file that was good and now has a bad document (a typo, an
			// editor's half-written save) keeps its last good version: its
			// objects vanishing would read as their deletion, and pods
			// would leave by their nodes.
			s.log.Warn("file source: a document of the file is bad; its last good version stays in force until it is fixed or removed", "file", path, "refused", bad)
			good[n], f = prev, prev.copy()
		}
		s.add(&l, path, f)
	}

	s.mu.Lock()
	s.good = good
	s.sigs = sigs
	var kinds []Kind
	if s.mergeEgressIPs(l.eips) {
		kinds = append(kinds, KindEgressIP)
	}
	if !reflect.DeepEqual(l.nodes, s.nodes) {
		s.nodes = l.nodes
		kinds = append(kinds, KindNode)
	}
	if !reflect.DeepEqual(l.nss, s.nss) {
		s.nss = l.nss
		kinds = append(kinds, KindNamespace)
	}
	if !reflect.DeepEqual(l.pods, s.pods) {
		s.pods = l.pods
		kinds = append(kinds, KindPod)
	}
	if s.mergeTraffic(l.traffic) {
		kinds = append(kinds, KindTraffic)
	}
	changed := s.changed
	s.mu.Unlock()
	if changed != nil {
		for _, k := range kinds {
			changed(k)
		}
	}
}

func (s *Dir) refuse(file string, doc int, format string, args ...any) {
	s.Errors.Add(1)
	s.log.Error("file source: document ignored", "file", file, "document", doc, "reason", fmt.Sprintf(format, args...))
}

// loadFile decodes every document of one file; bad counts the documents
// it refused (each logged and counted in Errors).
func (s *Dir) loadFile(path string) (l loaded, bad int) {
	l = newLoaded()
	refuse := func(doc int, format string, args ...any) {
		bad++
		s.refuse(path, doc, format, args...)
	}
	f, err := os.Open(path)
	if err != nil {
		refuse(0, "cannot open: %v", err)
		return l, bad
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		refuse(0, "cannot read: %v", err)
		return l, bad
	}
	if len(b) > maxFileSize {
		refuse(0, "larger than %d bytes", maxFileSize)
		return l, bad
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if !errors.Is(err, io.EOF) {
				// The decoder cannot resynchronise after a syntax error.
				refuse(doc, "not valid YAML or JSON (the rest of the file is skipped): %v", err)
			}
			return l, bad
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue // an empty document between "---" lines
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw, &tm); err != nil {
			refuse(doc, "not an object: %v", err)
			continue
		}
		switch {
		case tm.APIVersion == egressv1.SchemeGroupVersion.String() && tm.Kind == egressv1.Kind:
			e := &egressv1.EgressIP{}
			if err := strictUnmarshal(raw, e); err != nil {
				refuse(doc, "EgressIP does not decode: %v", err)
				continue
			}
			if e.Name == "" {
				refuse(doc, "EgressIP has no metadata.name")
				continue
			}
			if err := e.Validate(); err != nil {
				// Still used: the controller reports bad IPs as InvalidEgressIP Events.
				s.log.Warn("file source: EgressIP has problems", "file", path, "err", err)
			}
			if _, dup := l.eips[e.Name]; dup {
				refuse(doc, "EgressIP %q is defined twice; the first definition is used", e.Name)
				continue
			}
			l.eips[e.Name], l.doc["EgressIP/"+e.Name] = e, doc
		case tm.APIVersion == egressv1.SchemeGroupVersion.String() && tm.Kind == egressv1.TrafficKind:
			x := &egressv1.EgressIPTraffic{}
			if err := strictUnmarshal(raw, x); err != nil {
				refuse(doc, "EgressIPTraffic does not decode: %v", err)
				continue
			}
			if x.Name == "" {
				refuse(doc, "EgressIPTraffic has no metadata.name")
				continue
			}
			// Still used, as the API server would have refused it: the plan
			// leaves the bad entries out and uses the rest.
			for _, err := range x.Problems() {
				s.log.Warn("file source: EgressIPTraffic has problems; the bad entries are not used", "file", path, "name", x.Name, "err", err)
			}
			if _, dup := l.traffic[x.Name]; dup {
				refuse(doc, "EgressIPTraffic %q is defined twice; the first definition is used", x.Name)
				continue
			}
			// Status is the controller's (a status subresource in the API).
			x.Status = egressv1.EgressIPTrafficStatus{}
			l.traffic[x.Name], l.doc[egressv1.TrafficKind+"/"+x.Name] = x, doc
		case tm.APIVersion == "v1" && tm.Kind == "Node":
			n := &corev1.Node{}
			if !s.decodeCore(path, doc, raw, n, &n.ObjectMeta, false) {
				bad++
				continue
			}
			if _, dup := l.nodes[n.Name]; dup {
				refuse(doc, "Node %q is defined twice; the first definition is used", n.Name)
				continue
			}
			// No kubelet reports readiness here: a node without a Ready
			// condition is Ready; write one with status False to take it down.
			if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady }) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue})
			}
			l.nodes[n.Name], l.doc["Node/"+n.Name] = n, doc
		case tm.APIVersion == "v1" && tm.Kind == "Namespace":
			ns := &corev1.Namespace{}
			if !s.decodeCore(path, doc, raw, ns, &ns.ObjectMeta, false) {
				bad++
				continue
			}
			if _, dup := l.nss[ns.Name]; dup {
				refuse(doc, "Namespace %q is defined twice; the first definition is used", ns.Name)
				continue
			}
			l.nss[ns.Name], l.doc["Namespace/"+ns.Name] = ns, doc
		case tm.APIVersion == "v1" && tm.Kind == "Pod":
			p := &corev1.Pod{}
			if !s.decodeCore(path, doc, raw, p, &p.ObjectMeta, true) {
				bad++
				continue
			}
			key := p.Namespace + "/" + p.Name
			if _, dup := l.pods[key]; dup {
				refuse(doc, "Pod %s is defined twice; the first definition is used", key)
				continue
			}
			l.pods[key], l.doc["Pod/"+key] = p, doc
		default:
			refuse(doc, "kind %q of apiVersion %q is not one the controller reads (EgressIP and EgressIPTraffic k8s.ovn.org/v1, Node, Namespace, Pod v1)", tm.Kind, tm.APIVersion)
		}
	}
}

func strictUnmarshal(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func (s *Dir) decodeCore(path string, doc int, raw []byte, v any, meta *metav1.ObjectMeta, namespaced bool) bool {
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
func (s *Dir) mergeEgressIPs(in map[string]*egressv1.EgressIP) bool {
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
			// Annotations count: the controller's egret.io/standby is one,
			// and the gateway agents act on it.
			if reflect.DeepEqual(old.Spec, e.Spec) && reflect.DeepEqual(old.ObjectMeta.Labels, e.ObjectMeta.Labels) &&
				reflect.DeepEqual(old.ObjectMeta.Annotations, e.ObjectMeta.Annotations) {
				continue
			}
			e.Status = old.Status // the controller owns status and the standby annotation
			egressv1.SetStandbyAnnotation(e, old.Annotations[egressv1.AnnotationStandby])
		} else if st, standby, ok := s.readStatus(name); ok {
			e.Status = st
			egressv1.SetStandbyAnnotation(e, standby)
		}
		s.rv++
		e.ResourceVersion = strconv.FormatUint(s.rv, 10)
		s.eips[name] = e
		changed = true
	}
	return changed
}

// mergeTraffic installs the loaded EgressIPTraffic objects as
// mergeEgressIPs does EgressIPs: an unchanged object keeps its status and
// resourceVersion, a new one takes the status its file holds (a restarted
// controller keeps what it resolved). The caller holds s.mu.
func (s *Dir) mergeTraffic(in map[string]*egressv1.EgressIPTraffic) bool {
	changed := false
	for name := range s.traffic {
		if _, ok := in[name]; !ok {
			delete(s.traffic, name)
			if !s.readOnly {
				os.Remove(s.trafficStatusPath(name))
			}
			changed = true
		}
	}
	for name, x := range in {
		x.UID = types.UID("file-" + egressv1.TrafficResource + "-" + name)
		old, ok := s.traffic[name]
		if ok {
			if reflect.DeepEqual(old.Spec, x.Spec) && reflect.DeepEqual(old.Labels, x.Labels) && reflect.DeepEqual(old.Annotations, x.Annotations) {
				continue
			}
			x.Status = old.Status
		} else if !s.readOnly {
			st, err := readTrafficStatusFile(s.trafficStatusPath(name))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("file source: ignoring an unreadable status file", "file", s.trafficStatusPath(name), "err", err)
			}
			x.Status = st
		}
		s.rv++
		x.ResourceVersion = strconv.FormatUint(s.rv, 10)
		s.traffic[name] = x
		changed = true
	}
	return changed
}

// TrafficStatusDir is the folder of the EgressIPTraffic status files,
// inside StatusDir (an EgressIP name cannot hold a "/", so no EgressIP
// status file can be it).
const TrafficStatusDir = egressv1.TrafficResource

func (s *Dir) trafficStatusPath(name string) string {
	return filepath.Join(s.dir, StatusDir, TrafficStatusDir, name+".yaml")
}

// readTrafficStatusFile reads one EgressIPTraffic status file; a missing
// file is an os.ErrNotExist error.
func readTrafficStatusFile(path string) (egressv1.EgressIPTrafficStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return egressv1.EgressIPTrafficStatus{}, err
	}
	var x egressv1.EgressIPTraffic
	if err := yaml.Unmarshal(b, &x); err != nil {
		return egressv1.EgressIPTrafficStatus{}, fmt.Errorf("%s: %w", path, err)
	}
	return x.Status, nil
}

// readTrafficStatus is a reader's poll of the EgressIPTraffic status files
// the controller writes: a change is reported as a change of KindTraffic.
// No folder means no status yet; an unreadable file keeps the last read.
func (s *Dir) readTrafficStatus() {
	dir := filepath.Join(s.dir, StatusDir, TrafficStatusDir)
	out := map[string]egressv1.EgressIPTrafficStatus{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if e.IsDir() || !ok || name == "" || strings.HasPrefix(name, ".") {
			continue
		}
		st, ferr := readTrafficStatusFile(filepath.Join(dir, e.Name()))
		if errors.Is(ferr, os.ErrNotExist) {
			continue // replaced or removed meanwhile
		}
		if ferr != nil {
			err = ferr
			break
		}
		out[name] = st
	}
	s.mu.Lock()
	last := s.trafficErr
	if err != nil {
		s.trafficErr = err.Error()
		s.mu.Unlock()
		if err.Error() != last {
			s.log.Warn("file source: cannot read the EgressIPTraffic status files; the last read stays in force", "dir", dir, "err", err)
		}
		return
	}
	s.trafficErr = ""
	differ := !reflect.DeepEqual(s.trafficStatus, out)
	s.trafficStatus = out
	changed := s.changed
	s.mu.Unlock()
	if differ && changed != nil {
		changed(KindTraffic)
	}
}

func (s *Dir) statusPath(name string) string {
	return filepath.Join(s.dir, StatusDir, name+".yaml")
}

// readStatus reads the status and standby annotation a previous run
// wrote, if any.
func (s *Dir) readStatus(name string) (egressv1.EgressIPStatus, string, bool) {
	st, standby, err := readStatusFile(filepath.Join(s.dir, StatusDir), name)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("file source: ignoring an unreadable status file", "file", s.statusPath(name), "err", err)
		}
		return egressv1.EgressIPStatus{}, "", false
	}
	return st, standby, true
}

// readStatusFile reads the status file of EgressIP name in statusDir (a
// directory's StatusDir folder): the status and the egret.io/standby
// annotation written with it. A missing file is an os.ErrNotExist error.
func readStatusFile(statusDir, name string) (egressv1.EgressIPStatus, string, error) {
	b, err := os.ReadFile(filepath.Join(statusDir, name+".yaml"))
	if err != nil {
		return egressv1.EgressIPStatus{}, "", fmt.Errorf("status of %s: %w", name, err)
	}
	var e egressv1.EgressIP
	if err := yaml.Unmarshal(b, &e); err != nil {
		return egressv1.EgressIPStatus{}, "", fmt.Errorf("status of %s: %w", name, err)
	}
	return e.Status, e.Annotations[egressv1.AnnotationStandby], nil
}

// readStatusFiles reads every <name>.yaml status file the controller wrote
// into statusDir, by EgressIP name, for a reader in another process: the
// statuses and the non-empty standby annotations. Any unreadable or
// unparsable file is an error; a file removed while the folder is read is
// skipped.
func readStatusFiles(statusDir string) (Statuses, map[string]string, error) {
	entries, err := os.ReadDir(statusDir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the status directory: %w", err)
	}
	out, standbys := Statuses{}, map[string]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if e.IsDir() || !ok || name == "" || strings.HasPrefix(name, ".") {
			continue
		}
		st, standby, err := readStatusFile(statusDir, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced or removed meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		out[name] = st
		if standby != "" {
			standbys[name] = standby
		}
	}
	return out, standbys, nil
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

// View implements Source. A reader's EgressIPs carry the status and the
// standby annotation of their status file when there is one.
func (s *Dir) View() View {
	s.mu.Lock()
	defer s.mu.Unlock()
	eips := sorted(s.eips)
	for i, e := range eips {
		if x, ok := s.status[e.Name]; ok {
			c := e.DeepCopy()
			c.Status = *x.DeepCopy()
			egressv1.SetStandbyAnnotation(c, s.standbys[e.Name])
			eips[i] = c
		}
	}
	traffic := sorted(s.traffic)
	for i, x := range traffic {
		if st, ok := s.trafficStatus[x.Name]; ok {
			c := x.DeepCopy()
			c.Status = *st.DeepCopy()
			traffic[i] = c
		}
	}
	return View{EgressIPs: eips, Nodes: sorted(s.nodes), Namespaces: sorted(s.nss), Pods: sorted(s.pods), Traffic: traffic}
}

// EgressIP implements Source.
func (s *Dir) EgressIP(name string) (*egressv1.EgressIP, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.eips[name]
	return e, ok
}

// Check implements Source: it reads every status file. A reader keeps what
// it read for View and reports a change as a change of KindEgressIP.
func (s *Dir) Check(context.Context) (Statuses, error) {
	st, standbys, err := readStatusFiles(filepath.Join(s.dir, StatusDir))
	if err != nil || !s.readOnly {
		return st, err
	}
	s.mu.Lock()
	differ := !reflect.DeepEqual(s.status, st) || !reflect.DeepEqual(s.standbys, standbys)
	s.status, s.standbys = st, standbys
	changed := s.changed
	s.mu.Unlock()
	if differ && changed != nil {
		changed(KindEgressIP)
	}
	return st, nil
}

var egressIPResource = egressv1.SchemeGroupVersion.WithResource(egressv1.Resource).GroupResource()

// UpdateEgressIP implements Source: only the status and the
// egret.io/standby annotation are taken (the manifest files are the
// user's), with the API server's conflict rule.
func (s *Dir) UpdateEgressIP(_ context.Context, eip *egressv1.EgressIP) error {
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
	egressv1.SetStandbyAnnotation(next, eip.Annotations[egressv1.AnnotationStandby])
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
		return fmt.Errorf("writing the status of %s: %w", eip.Name, err)
	}
	s.eips[eip.Name] = next
	changed := s.changed
	s.mu.Unlock()
	if changed != nil {
		changed(KindEgressIP)
	}
	return nil
}

var trafficResource = egressv1.TrafficGroupVersionResource.GroupResource()

// UpdateTrafficStatus implements Source: t's status goes to its status
// file, with the API server's conflict rule; the manifest is the user's.
func (s *Dir) UpdateTrafficStatus(_ context.Context, t *egressv1.EgressIPTraffic) error {
	if s.readOnly {
		return ErrReadOnly
	}
	changed, err := s.storeTrafficStatus(t)
	if err == nil && changed != nil {
		changed(KindTraffic)
	}
	return err
}

// storeTrafficStatus is UpdateTrafficStatus under s.mu; it returns the
// change callback to call once s.mu is released.
func (s *Dir) storeTrafficStatus(t *egressv1.EgressIPTraffic) (func(Kind), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.traffic[t.Name]
	if !ok {
		return nil, apierrors.NewNotFound(trafficResource, t.Name)
	}
	if cur.ResourceVersion != t.ResourceVersion {
		return nil, apierrors.NewConflict(trafficResource, t.Name,
			fmt.Errorf("the object has been modified (resourceVersion %s, now %s); please apply your changes to the latest version and try again", t.ResourceVersion, cur.ResourceVersion))
	}
	next := cur.DeepCopy()
	next.Status = *t.Status.DeepCopy()
	out := &egressv1.EgressIPTraffic{
		TypeMeta:   metav1.TypeMeta{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.TrafficKind},
		ObjectMeta: metav1.ObjectMeta{Name: t.Name},
		Status:     next.Status,
	}
	b, err := yaml.Marshal(out)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(s.trafficStatusPath(t.Name)), 0o755)
	}
	if err == nil {
		err = writeAtomic(s.trafficStatusPath(t.Name), b)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the status of EgressIPTraffic %s: %w", t.Name, err)
	}
	s.rv++
	next.ResourceVersion = strconv.FormatUint(s.rv, 10)
	s.traffic[t.Name] = next
	return s.changed, nil
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

// Event implements Source: the Event is appended to events.log
// (the controller logs it too).
func (s *Dir) Event(ref *corev1.ObjectReference, eventType, reason, message string) {
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
