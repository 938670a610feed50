package flowsync

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
)

// The state file a gateway leaves for its next process on the same node
// (graceful restart): the magic "EGRS", the wall-clock time it was written
// (Unix nanoseconds, 8 bytes), then the items of a sync batch: each
// return path ('P') before the flows ('U', conntrack export records) that
// name it.
var stateMagic = [4]byte{'E', 'G', 'R', 'S'}

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
	w := bufio.NewWriterSize(tmp, 1<<20)
	w.Write(stateMagic[:])
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
	if err := w.Flush(); err != nil {
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
// WriteState, at most MaxStateAge ago), with their lifetimes shortened by
// the time since, and removes the file: it is read once. It returns how
// many flows were adopted and how many could not be (port taken, table
// full). A missing file is no error (0, 0). Call it once the first
// configuration is installed: its encapsulations must be accepted.
func LoadState(path string, p *gateway.Pipeline, now int64) (adopted, failed int, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the flow state: %w", err)
	}
	os.Remove(path)
	if len(b) < 12 || [4]byte(b[:4]) != stateMagic {
		return 0, 0, fmt.Errorf("flow state %s: not a state file", path)
	}
	age := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(b[4:]))))
	if age < 0 || age > MaxStateAge {
		return 0, 0, fmt.Errorf("flow state %s was written %v ago; only files younger than %v are loaded", path, age.Round(time.Second), MaxStateAge)
	}
	b = b[12:]
	paths := map[uint32]gateway.ReturnPath{}
	var it item
	for len(b) > 0 {
		if b, err = next(b, &it); err != nil {
			return adopted, failed, fmt.Errorf("flow state %s: %w", path, err)
		}
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
			adopted++
		default:
			return adopted, failed, fmt.Errorf("flow state %s: %w: item %q", path, errMalformed, it.kind)
		}
	}
	return adopted, failed, nil
}
