package flowsync

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/natlog"
)

// The state file a gateway leaves for its next process on the same node
// (graceful restart), version 2: the magic "EGST", the format version (1
// byte), the wall-clock time it was written (Unix nanoseconds, 8 bytes),
// the items of a sync batch (each return path 'P' before the flows 'U',
// conntrack export records, that name it), then the CRC-32C of everything
// before (4 bytes), so that a file cut short anywhere is told from a whole
// one. Version 1 (Egret 0.1.0) is the magic "EGRS", the time and the items:
// no version byte, no checksum.
var (
	stateMagic   = [4]byte{'E', 'G', 'S', 'T'}
	stateMagicV1 = [4]byte{'E', 'G', 'R', 'S'}
)

// StateVersion is the state file format version WriteState writes.
const StateVersion = 2

// stateVersions are the state file versions LoadState reads: its own and
// the previous minor release's (docs/operations.md, "Version skew").
var stateVersions = versions{1, StateVersion}

const (
	stateHeader   = 4 + 1 + 8
	stateHeaderV1 = 4 + 8
	stateSumLen   = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StateRefusal is why LoadState refused a state file (the reason label of
// egret_gateway_state_file_refused_total).
type StateRefusal string

// Reasons of a refused state file; the gateway then starts without the
// previous process's flows.
const (
	// StateRefusedVersion: a format version this gateway does not read.
	StateRefusedVersion StateRefusal = "version"
	// StateRefusedMalformed: cut short, damaged, or not a state file.
	StateRefusedMalformed StateRefusal = "malformed"
	// StateRefusedStale: written more than MaxStateAge ago.
	StateRefusedStale StateRefusal = "stale"
	// StateRefusedUnreadable: the file is there but cannot be read.
	StateRefusedUnreadable StateRefusal = "unreadable"
)

// StateRefusals lists every StateRefusal.
var StateRefusals = []StateRefusal{StateRefusedVersion, StateRefusedMalformed, StateRefusedStale, StateRefusedUnreadable}

// StateError is a state file LoadState refused: none of its flows were
// adopted.
type StateError struct {
	Path   string       // the state file
	Reason StateRefusal // why it was refused
	Err    error        // what is wrong with it, for the log
}

// Error names the file and what is wrong with it.
func (e *StateError) Error() string { return fmt.Sprintf("flow state %s: %v", e.Path, e.Err) }

// Unwrap returns what is wrong with the file.
func (e *StateError) Unwrap() error { return e.Err }

// MaxStateAge is how old a state file may be and still be loaded: older,
// its flows' servers have given up on them, and its ports may be another
// gateway's by now.
const MaxStateAge = 2 * time.Minute

// WriteState writes every flow of p with its remaining lifetime (relative to
// now, the pipeline's clock) to path, through a temporary file renamed into
// place, and returns how many. Call it once the workers have stopped.
func WriteState(path string, p *gateway.Pipeline, now int64) (int, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, fmt.Errorf("write the flow state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".flows-*")
	if err != nil {
		return 0, fmt.Errorf("write the flow state: %w", err)
	}
	defer os.Remove(tmp.Name())
	sum := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(tmp, 1<<20)
	w := io.MultiWriter(bw, sum)
	w.Write(stateMagic[:])
	w.Write([]byte{StateVersion})
	binary.Write(w, binary.BigEndian, time.Now().UnixNano())
	paths := map[uint32]bool{}
	var buf []byte
	n := 0
	p.Conntrack().Range(now, func(f *conntrack.Flow, rem time.Duration) {
		if rem <= 0 {
			return
		}
		buf = buf[:0]
		if !paths[f.Aux] {
			rp, ok := p.ReturnPath(f.Aux)
			if !ok {
				return
			}
			buf = appendPath(buf, f.Aux, rp)
			paths[f.Aux] = true
		}
		buf = conntrack.AppendRecord(append(buf, itemUpsert), f, rem)
		w.Write(buf)
		n++
	})
	bw.Write(sum.Sum(nil))
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("write the flow state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("write the flow state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("write the flow state: %w", err)
	}
	return n, nil
}

// LoadState adopts into p the flows of the state file at path (written by
// WriteState of this release or the previous one, at most MaxStateAge
// ago), with their lifetimes shortened by the time since, and removes the
// file: it is read once. It returns how many flows were adopted and how
// many could not be (port taken, table full). A missing file is no error
// (0, 0). A file it refuses (*StateError) adopts nothing: the whole file is
// checked first. Call it once the first configuration is installed: its
// encapsulations must be accepted.
func LoadState(path string, p *gateway.Pipeline, now int64) (adopted, failed int, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, &StateError{Path: path, Reason: StateRefusedUnreadable, Err: err}
	}
	os.Remove(path)
	items, written, err := parseState(b)
	if err != nil {
		var ve *versionError
		r := StateRefusedMalformed
		if errors.As(err, &ve) {
			r = StateRefusedVersion
		}
		return 0, 0, &StateError{Path: path, Reason: r, Err: err}
	}
	age := time.Since(written)
	if age < 0 || age > MaxStateAge {
		return 0, 0, &StateError{Path: path, Reason: StateRefusedStale,
			Err: fmt.Errorf("written %v ago; only files younger than %v are loaded", age.Round(time.Second), MaxStateAge)}
	}
	paths := map[uint32]gateway.ReturnPath{}
	var it item
	for len(items) > 0 {
		items, _ = next(items, &it) // parseState checked every item
		switch it.kind {
		case itemPath:
			paths[it.aux] = it.path
		case itemUpsert:
			rp, ok := paths[it.flow.Aux]
			rem := time.Duration(it.rem) - age
			if !ok || rem <= 0 {
				failed++
				continue
			}
			if err := p.Adopt(&it.flow, rp, rem, now); err != nil {
				failed++
				continue
			}
			if nl := p.NATLog(); nl != nil {
				nl.Push(natlog.EventAdopt, &it.flow)
			}
			adopted++
		}
	}
	return adopted, failed, nil
}

// parseState checks a whole state file, of any version LoadState reads,
// and returns its items and when it was written.
func parseState(b []byte) (items []byte, written time.Time, err error) {
	if len(b) < 4 {
		return nil, time.Time{}, fmt.Errorf("%w: not a state file: %d bytes", errMalformed, len(b))
	}
	switch [4]byte(b) {
	case stateMagicV1:
		if len(b) < stateHeaderV1 {
			return nil, time.Time{}, fmt.Errorf("%w: a version 1 state file cut short in its header", errMalformed)
		}
		written, items = time.Unix(0, int64(binary.BigEndian.Uint64(b[4:]))), b[stateHeaderV1:]
	case stateMagic:
		if len(b) < 5 {
			return nil, time.Time{}, fmt.Errorf("%w: a state file cut short in its header", errMalformed)
		}
		if v := b[4]; v < 2 || v > stateVersions.newest { // version 1 is EGRS's
			return nil, time.Time{}, &versionError{format: "state file format", verb: "reads", other: "the gateway that wrote it", got: v, here: stateVersions}
		}
		if len(b) < stateHeader+stateSumLen {
			return nil, time.Time{}, fmt.Errorf("%w: a state file cut short in its header", errMalformed)
		}
		body := b[:len(b)-stateSumLen]
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(body):]) {
			return nil, time.Time{}, fmt.Errorf("%w: its checksum does not match (cut short or altered)", errMalformed)
		}
		written, items = time.Unix(0, int64(binary.BigEndian.Uint64(b[5:]))), body[stateHeader:]
	default:
		return nil, time.Time{}, fmt.Errorf("%w: not a state file: it is %s", errMalformed, kindOf(b[:4]))
	}
	var it item
	for rest := items; len(rest) > 0; {
		if rest, err = next(rest, &it); err != nil {
			return nil, time.Time{}, err
		}
		if it.kind != itemPath && it.kind != itemUpsert {
			return nil, time.Time{}, fmt.Errorf("%w: item %q", errMalformed, it.kind)
		}
	}
	return items, written, nil
}
