package gwagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/filesource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Statuses maps an EgressIP name to its status as last read from the
// source's backend itself (not a cache).
type Statuses map[string]egressv1.EgressIPStatus

// Source is where the agent's objects come from.
type Source interface {
	// Start lists everything and returns once the cache is filled; changed
	// is then called, from any goroutine, after each change.
	Start(ctx context.Context, changed func()) error
	// Objects returns the current objects (Node left empty).
	Objects() Inputs
	// Check reaches the backend once (the API server, or the directory and
	// its status files) and returns the EgressIP statuses it read. A nil
	// error is the "contact" that keeps the agent from fencing itself.
	Check(ctx context.Context) (Statuses, error)
}

// FileSource reads the objects from a directory of YAML files
// (control/filesource) and the status a controller in another process
// writes into its status/ folder.
//
// Contact is defined as: the directory and its status folder can be listed
// and every status/*.yaml file can be read and parsed. Status files change
// only when assignments change, so their age says nothing about the
// controller; a directory that disappears, cannot be read or holds a
// corrupt status file is a lost contact.
type FileSource struct {
	dir   string
	fs    *filesource.Source
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	status  Statuses // last good read
	changed func()
}

// NewFileSource returns a FileSource over dir, polled every interval
// (filesource.DefaultInterval if zero).
func NewFileSource(dir string, interval time.Duration, log *slog.Logger) (*FileSource, error) {
	if interval <= 0 {
		interval = filesource.DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fs, err := filesource.NewReadOnly(dir, interval, log) // status files are the controller's
	if err != nil {
		return nil, err
	}
	return &FileSource{dir: dir, fs: fs, every: interval, log: log}, nil
}

// Start implements Source.
func (s *FileSource) Start(ctx context.Context, changed func()) error {
	if err := s.fs.Start(ctx, func(controller.Kind) { changed() }); err != nil {
		return err
	}
	if _, err := s.Check(ctx); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		// No controller has written a status yet (only it creates the
		// folder): not fatal, but no contact either; the agent fences
		// if the folder does not appear within its fence time.
		s.log.Warn("gateway agent: no status folder yet; waiting for the controller to write one", "dir", filepath.Join(s.dir, filesource.StatusDir))
	}
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	go func() {
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.Check(ctx)
			}
		}
	}()
	return nil
}

// Check implements Source: it reads every status file (and reports a
// change to the changed function of Start).
func (s *FileSource) Check(context.Context) (Statuses, error) {
	m, err := filesource.ReadStatuses(filepath.Join(s.dir, filesource.StatusDir))
	if err != nil {
		return nil, err
	}
	st := Statuses(m)
	s.mu.Lock()
	differ := !reflect.DeepEqual(s.status, st)
	s.status = st
	changed := s.changed
	s.mu.Unlock()
	if differ && changed != nil {
		changed()
	}
	return st, nil
}

// Objects implements Source: an EgressIP with a status file gets that
// status, otherwise the one in its manifest.
func (s *FileSource) Objects() Inputs {
	s.mu.Lock()
	st := s.status
	s.mu.Unlock()
	eips := s.fs.EgressIPs()
	for i, e := range eips {
		if x, ok := st[e.Name]; ok {
			c := e.DeepCopy()
			c.Status = *x.DeepCopy()
			eips[i] = c
		}
	}
	return Inputs{EgressIPs: eips, Nodes: s.fs.Nodes(), Namespaces: s.fs.Namespaces(), Pods: s.fs.Pods()}
}

// KubeSource reads the objects through the controller's informers; Check
// lists the EgressIP objects from the API server (a quorum read).
type KubeSource struct {
	ks  *controller.KubeSource
	eip *egressv1.Client
}

// NewKubeSource builds the informers and the client for cfg.
func NewKubeSource(cfg *rest.Config) (*KubeSource, error) {
	ks, err := controller.NewKubeSource(cfg)
	if err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	eip, err := egressv1.NewForConfig(c)
	if err != nil {
		return nil, err
	}
	return &KubeSource{ks: ks, eip: eip}, nil
}

// Start implements Source.
func (s *KubeSource) Start(ctx context.Context, changed func()) error {
	return s.ks.Start(ctx, func(controller.Kind) { changed() })
}

// Objects implements Source.
func (s *KubeSource) Objects() Inputs {
	return Inputs{EgressIPs: s.ks.EgressIPs(), Nodes: s.ks.Nodes(), Namespaces: s.ks.Namespaces(), Pods: s.ks.Pods()}
}

// Check implements Source.
func (s *KubeSource) Check(ctx context.Context) (Statuses, error) {
	l, err := s.eip.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing EgressIPs from the API server: %w", err)
	}
	out := make(Statuses, len(l.Items))
	for _, e := range l.Items {
		out[e.Name] = e.Status
	}
	return out, nil
}

// agree keeps, of each object's status items, those fresh also has: used
// right after contact returns, when a cache may still hold a placement
// that moved meanwhile. Objects fresh does not know host nothing.
func agree(eips []*egressv1.EgressIP, fresh Statuses) []*egressv1.EgressIP {
	out := make([]*egressv1.EgressIP, 0, len(eips))
	for _, e := range eips {
		if e == nil {
			continue
		}
		f := fresh[e.Name]
		items := slices.DeleteFunc(slices.Clone(e.Status.Items), func(it egressv1.EgressIPStatusItem) bool {
			return !slices.Contains(f.Items, it)
		})
		if len(items) != len(e.Status.Items) {
			c := e.DeepCopy()
			c.Status.Items = items
			e = c
		}
		out = append(out, e)
	}
	return out
}
