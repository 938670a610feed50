package natlog

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names: the current file, and rotated ones named by when they were
// rotated, so that names sort by age.
const (
	currentName = "natlog.jsonl"
	rotatedPre  = "natlog-"
	fileSuffix  = ".jsonl"
)

// rotator writes lines to dir/natlog.jsonl; when a line would take it past
// maxBytes it renames it to natlog-<UTC time>.jsonl and starts a new one,
// keeping at most maxFiles files in all and none older than maxAge.
type rotator struct {
	dir      string
	maxBytes int64
	maxFiles int
	maxAge   time.Duration
	now      func() time.Time

	f    *os.File
	w    *bufio.Writer
	size int64
}

func openRotator(dir string, maxBytes int64, maxFiles int, maxAge time.Duration, now func() time.Time) (*rotator, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("natlog directory: %w", err)
	}
	r := &rotator{dir: dir, maxBytes: maxBytes, maxFiles: maxFiles, maxAge: maxAge, now: now}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, r.prune()
}

func (r *rotator) open() error {
	f, err := os.OpenFile(filepath.Join(r.dir, currentName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("natlog file: %w", err)
	}
	r.f, r.size = f, st.Size()
	if r.w == nil {
		r.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		r.w.Reset(f)
	}
	return nil
}

// write appends one line, rotating first if it would not fit.
func (r *rotator) write(line []byte, at time.Time) error {
	if r.f == nil {
		if err := r.open(); err != nil {
			return err
		}
	}
	if r.size > 0 && r.size+int64(len(line)) > r.maxBytes {
		if err := r.rotate(at); err != nil {
			return err
		}
	}
	n, err := r.w.Write(line)
	r.size += int64(n)
	if err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	return nil
}

func (r *rotator) rotate(at time.Time) error {
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	r.f = nil
	name := rotatedPre + at.UTC().Format("20060102T150405.000000000Z") + fileSuffix
	if err := os.Rename(filepath.Join(r.dir, currentName), filepath.Join(r.dir, name)); err != nil {
		return fmt.Errorf("natlog rotation: %w", err)
	}
	if err := r.open(); err != nil {
		return err
	}
	return r.prune()
}

// prune removes the oldest rotated files beyond maxFiles-1 and those
// older than maxAge.
func (r *rotator) prune() error {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("natlog rotation: %w", err)
	}
	var old []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, rotatedPre) && strings.HasSuffix(n, fileSuffix) && e.Type().IsRegular() {
			old = append(old, n)
		}
	}
	slices.Sort(old) // oldest first
	now := r.now()
	for i, n := range old {
		drop := len(old)-i > r.maxFiles-1
		if !drop && r.maxAge > 0 {
			if info, err := os.Stat(filepath.Join(r.dir, n)); err == nil && now.Sub(info.ModTime()) > r.maxAge {
				drop = true
			}
		}
		if drop {
			if err := os.Remove(filepath.Join(r.dir, n)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("natlog rotation: %w", err)
			}
		}
	}
	return nil
}

// flush hands buffered lines to the kernel: a killed process loses none
// that a drain wrote.
func (r *rotator) flush() error {
	if r.f == nil {
		return nil
	}
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	return nil
}

func (r *rotator) close() error {
	if r.f == nil {
		return nil
	}
	err := r.w.Flush()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	r.f = nil
	if err != nil {
		return fmt.Errorf("natlog file: %w", err)
	}
	return nil
}
