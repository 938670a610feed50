package natlog

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Binding is one binding as Query answers it; its JSON is `egret natlog
// -o json`'s shape.
type Binding struct {
	Namespace   string     `json:"namespace"`
	Pod         string     `json:"pod"`
	PodIP       string     `json:"podIP"`
	PodPort     uint16     `json:"podPort"`
	Destination string     `json:"destination"`
	Protocol    string     `json:"protocol"`
	Gateway     string     `json:"gateway"`
	Start       time.Time  `json:"start"`
	End         *time.Time `json:"end"` // null while the binding holds

	egressIP   string
	egressPort uint16
}

// Question is what Query looks for: the binding of egress IP:Port (and
// Protocol, if set: "tcp", "udp") that held at At.
type Question struct {
	IP       netip.Addr
	Port     uint16
	Protocol string
	At       time.Time
}

// Entries reads every NAT log file (*.jsonl) under dir, in any depth
// (a lab keeps one directory per gateway). A line that is not a record is
// skipped and counted in bad.
func Entries(dir string) (es []Entry, bad int, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), fileSuffix) {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		got, b, err := readEntries(f)
		es, bad = append(es, got...), bad+b
		return err
	})
	if err != nil {
		return nil, bad, fmt.Errorf("reading the NAT log: %w", err)
	}
	return es, bad, nil
}

// readEntries reads NAT log lines from r; lines that are not records are
// counted in bad (a line cut by a crash, say).
func readEntries(r io.Reader) (es []Entry, bad int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		e, perr := parseEntry(line)
		if perr != nil || parseEvent(e.Event) == 0 {
			bad++
			continue
		}
		es = append(es, e)
	}
	return es, bad, sc.Err()
}

// bindingKey is what identifies one binding on one gateway.
type bindingKey struct {
	gateway, proto, podIP, egressIP, dstIP string
	podPort, egressPort, dstPort           uint16
}

// bindings turns events into bindings: a create or adopt opens one (a
// second open of an open binding on the same gateway, e.g. a flow sync
// update, changes nothing), an end closes it.
func bindings(es []Entry) []Binding {
	slices.SortStableFunc(es, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	open := map[bindingKey]int{}
	var out []Binding
	for _, e := range es {
		k := bindingKey{e.Gateway, e.Protocol, e.PodIP, e.EgressIP, e.DstIP, e.PodPort, e.EgressPort, e.DstPort}
		switch parseEvent(e.Event) {
		case EventCreate, EventAdopt:
			if _, ok := open[k]; ok {
				continue
			}
			open[k] = len(out)
			out = append(out, Binding{Namespace: e.Namespace, Pod: e.Pod, PodIP: e.PodIP, PodPort: e.PodPort,
				Destination: joinHostPort(e.DstIP, e.DstPort), Protocol: e.Protocol, Gateway: e.Gateway, Start: e.Time,
				egressIP: e.EgressIP, egressPort: e.EgressPort})
		case EventEnd:
			if i, ok := open[k]; ok {
				t := e.Time
				out[i].End = &t
				delete(open, k)
			}
		}
	}
	return out
}

func joinHostPort(ip string, port uint16) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip + ":" + strconv.Itoa(int(port)) // as the file has it
	}
	return netip.AddrPortFrom(a, port).String()
}

// Query answers q from the log entries es: the bindings of q.IP:q.Port
// that started at or before q.At and had not ended before it, oldest first.
func Query(es []Entry, q Question) []Binding {
	ip := q.IP.Unmap().String()
	var out []Binding
	for _, b := range bindings(es) {
		if b.egressIP != ip || b.egressPort != q.Port || (q.Protocol != "" && b.Protocol != q.Protocol) {
			continue
		}
		if b.Start.After(q.At) || (b.End != nil && b.End.Before(q.At)) {
			continue
		}
		out = append(out, b)
	}
	slices.SortStableFunc(out, func(a, b Binding) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.Gateway, b.Gateway))
	})
	return out
}
