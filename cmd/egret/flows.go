package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
)

// DefaultFlowsSocket is where `egret flows` looks for the gateway's flow
// table: the --flows-socket of deploy/ (/run/egret is the gateway pod's
// hostPath, so the socket is also on the node).
const DefaultFlowsSocket = "/run/egret/flows.sock"

func init() {
	register("flows", "list a running gateway's flows (its --flows-socket): live ones and the backup flows it holds for other gateways", runFlows)
}

// flowEntry is one flow as `egret flows` prints it, and as the gateway's
// flows socket sends it: one JSON object per line.
type flowEntry struct {
	Proto      string         `json:"proto"`
	Pod        netip.AddrPort `json:"pod"`    // the pod's address and port (ICMP: its identifier)
	Server     netip.AddrPort `json:"server"` // the destination
	EgressIP   netip.Addr     `json:"egressIP"`
	EgressPort uint16         `json:"egressPort"` // the port (ICMP: identifier) the pod is seen with
	State      string         `json:"state"`
	ExpiresIn  float64        `json:"expiresIn"` // seconds left without traffic
	// Backup: this gateway does not host the egress IP; it holds the flow
	// for the gateway that does (flow sync, docs/continuity.md), or a
	// previous process's flow it has not handed back yet.
	Backup bool `json:"backup,omitempty"`
}

func protoName(p uint8) string {
	switch p {
	case conntrack.ProtoTCP:
		return "tcp"
	case conntrack.ProtoUDP:
		return "udp"
	case conntrack.ProtoICMP:
		return "icmp"
	case conntrack.ProtoICMPv6:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

// serveFlows serves h on the Unix socket path, mode 0600 (the flows name
// every pod's peers). It returns a function that closes the listener.
func serveFlows(path string, h http.Handler, log *slog.Logger) (func(), error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--flows-socket %s: removing what a previous run left: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--flows-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--flows-socket %s: %w", path, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("gateway: flows served", "socket", path)
	return func() { srv.Close(); os.Remove(path) }, nil
}

// engineFlows is the flow table of the engine cur holds (none while it
// holds none) and its clock.
func engineFlows(cur *atomic.Pointer[engine.Engine]) func() (*gateway.Pipeline, int64) {
	return func() (*gateway.Pipeline, int64) {
		e := cur.Load()
		if e == nil {
			return nil, 0
		}
		return e.Pipeline(), e.Now()
	}
}

// flowsHandler answers GET /flows, optionally ?egressIP=<ip>, with the flows
// of the pipeline current returns (and its clock now), one flowEntry per
// line. The table is read in chunks while the data plane runs
// (conntrack.Table.Range): flows created or removed meanwhile may or may
// not be listed.
func flowsHandler(current func() (*gateway.Pipeline, int64)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flows", func(w http.ResponseWriter, r *http.Request) {
		var only netip.Addr
		if s := r.URL.Query().Get("egressIP"); s != "" {
			var err error
			if only, err = netip.ParseAddr(s); err != nil {
				http.Error(w, fmt.Sprintf("egressIP %q is not an IP address", s), http.StatusBadRequest)
				return
			}
			only = only.Unmap()
		}
		pipe, now := current()
		if pipe == nil {
			http.Error(w, "the data plane is not running yet (waiting for a usable configuration)", http.StatusServiceUnavailable)
			return
		}
		snap := pipe.Snapshot()
		bw := bufio.NewWriterSize(w, 64<<10)
		enc := json.NewEncoder(bw)
		pipe.Conntrack().Range(now, func(f *conntrack.Flow, rem time.Duration) {
			nat := netip.AddrFrom16(f.NATAddr).Unmap()
			if only.IsValid() && nat != only {
				return
			}
			enc.Encode(flowEntry{
				Proto:      protoName(f.Orig.Proto),
				Pod:        netip.AddrPortFrom(netip.AddrFrom16(f.Orig.Src).Unmap(), f.Orig.SrcPort),
				Server:     netip.AddrPortFrom(netip.AddrFrom16(f.Orig.Dst).Unmap(), f.Orig.DstPort),
				EgressIP:   nat,
				EgressPort: f.NATPort,
				State:      f.State.String(),
				ExpiresIn:  rem.Seconds(),
				Backup:     snap == nil || !snap.Hosts(nat),
			})
		})
		bw.Flush()
	})
	return mux
}

// runFlows is `egret flows`: it asks the gateway on this node for its flows
// and prints them.
func runFlows(args []string) error {
	fs := newFlagSet("flows")
	socket := fs.String("socket", DefaultFlowsSocket, "the gateway's --flows-socket")
	ip := fs.String("egress-ip", "", "only the flows of this egress IP")
	asJSON := fs.Bool("json", false, "one JSON object per flow and line instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	q := ""
	if *ip != "" {
		a, err := netip.ParseAddr(*ip)
		if err != nil {
			return &usageError{cmd: fs.Name(), err: fmt.Errorf("--egress-ip %q is not an IP address", *ip)}
		}
		q = "?egressIP=" + url.QueryEscape(a.String())
	}
	return listFlows(os.Stdout, *socket, q, *asJSON)
}

// getFlows asks the gateway on socket for its flows (query: "" or
// "?egressIP=..."); the body is one flowEntry per line.
func getFlows(socket, query string) (*http.Response, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := hc.Get("http://gateway/flows" + query)
	if err != nil {
		return nil, fmt.Errorf("no gateway answers on %s (its --flows-socket; --socket names another): %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return nil, fmt.Errorf("the gateway on %s answers %s: %s", socket, resp.Status, b)
	}
	return resp, nil
}

// listFlows reads the flows from the gateway's socket and writes them to
// out: as the gateway sent them (JSON lines) or as a table.
func listFlows(out io.Writer, socket, query string, asJSON bool) error {
	resp, err := getFlows(socket, query)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if asJSON {
		_, err := io.Copy(out, resp.Body)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROTO\tPOD\tSERVER\tEGRESS\tSTATE\tEXPIRES\tBACKUP")
	dec := json.NewDecoder(resp.Body)
	for {
		var e flowEntry
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("the gateway on %s sent a flow that does not parse: %w", socket, err)
		}
		backup := ""
		if e.Backup {
			backup = "backup"
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%s\t%.0fs\t%s\n", e.Proto, e.Pod, e.Server, netip.AddrPortFrom(e.EgressIP, e.EgressPort), e.State, e.ExpiresIn, backup)
	}
	return tw.Flush()
}
