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
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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
	register("flows", "list a running gateway's flows (its --flows-socket): live ones and the backup flows it holds for other gateways; --drops streams a sample of the packets it drops", runFlows)
}

// Drop sampling over the flows socket (GET /drops?rate=N).
const (
	defaultDropRate = 10   // samples a second when --rate is not given
	maxDropRate     = 1000 // what one client may ask for
	dropBuffer      = 256  // samples a client may fall behind before it loses some
)

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

// dropEntry is one sampled dropped packet as `egret flows --drops` prints
// it, and as the gateway's flows socket streams it: one JSON object per line.
type dropEntry struct {
	Time time.Time `json:"time"`
	// Reason is the reason label of egret_gateway_dropped_packets_total.
	Reason string `json:"reason"`
	// Proto, Src and Dst are the (inner) packet's, when decoded: Src and
	// Dst are IP:port for TCP and UDP, the IP otherwise.
	Proto string `json:"proto,omitempty"`
	Src   string `json:"src,omitempty"`
	Dst   string `json:"dst,omitempty"`
	// ICMPType and ICMPCode are set for ICMP and ICMPv6.
	ICMPType *uint8 `json:"icmpType,omitempty"`
	ICMPCode *uint8 `json:"icmpCode,omitempty"`
	// Tunnel (vxlan, geneve), VTEP (the sending node's) and VNI are set
	// when the packet came through a tunnel; Local when it came from a pod
	// of the gateway's own node through the local port.
	Tunnel string     `json:"tunnel,omitempty"`
	VTEP   netip.Addr `json:"vtep,omitzero"`
	VNI    *uint32    `json:"vni,omitempty"`
	Local  bool       `json:"local,omitempty"`
	// Len is the frame's length in bytes.
	Len int `json:"len"`
	// Pod is the sending pod's namespace/name, when the gateway knows it
	// (agent mode).
	Pod string `json:"pod,omitempty"`
	// Lost counts the samples this stream lost so far because it was read
	// too slowly.
	Lost uint64 `json:"lost,omitempty"`
}

func newDropEntry(s *gateway.DropSample, lost uint64) dropEntry {
	e := dropEntry{Time: s.Time.UTC(), Reason: s.Reason.String(), Len: s.Len, Local: s.Local, Lost: lost}
	if s.Src.IsValid() {
		e.Proto = protoName(s.Proto)
		e.Src, e.Dst = s.Src.String(), s.Dst.String()
		if s.HasPorts {
			e.Src = netip.AddrPortFrom(s.Src, s.SrcPort).String()
			e.Dst = netip.AddrPortFrom(s.Dst, s.DstPort).String()
		}
		if s.HasICMP {
			t, c := s.ICMPType, s.ICMPCode
			e.ICMPType, e.ICMPCode = &t, &c
		}
	}
	switch s.Tunnel {
	case gateway.TunnelVXLAN:
		e.Tunnel = "vxlan"
	case gateway.TunnelGeneve:
		e.Tunnel = "geneve"
	}
	if s.Tunnel != gateway.TunnelNone {
		vni := s.VNI
		e.VTEP, e.VNI = s.OuterSrc, &vni
	}
	if s.Pod.Name != "" {
		e.Pod = s.Pod.Namespace + "/" + s.Pod.Name
	}
	return e
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
	mux.HandleFunc("GET /drops", func(w http.ResponseWriter, r *http.Request) {
		rate := defaultDropRate
		if s := r.URL.Query().Get("rate"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > maxDropRate {
				http.Error(w, fmt.Sprintf("rate %q: give a whole number of samples a second, 1 to %d", s, maxDropRate), http.StatusBadRequest)
				return
			}
			rate = n
		}
		pipe, _ := current()
		if pipe == nil {
			http.Error(w, "the data plane is not running yet (waiting for a usable configuration)", http.StatusServiceUnavailable)
			return
		}
		streamDrops(w, r, pipe.SubscribeDrops(rate, dropBuffer))
	})
	return mux
}

// streamDrops writes sub's samples to w, one dropEntry per line, until
// the client goes away. The header goes out at once, so the client knows
// it is subscribed before the first drop.
func streamDrops(w http.ResponseWriter, r *http.Request, sub *gateway.DropSubscription) {
	defer sub.Close()
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case s, ok := <-sub.C:
			if !ok {
				return
			}
			if err := enc.Encode(newDropEntry(&s, sub.Lost())); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// runFlows is `egret flows`: it asks the gateway on this node for its flows
// and prints them.
func runFlows(args []string) error {
	fs := newFlagSet("flows")
	socket := fs.String("socket", DefaultFlowsSocket, "the gateway's --flows-socket")
	ip := fs.String("egress-ip", "", "only the flows of this egress IP")
	asJSON := fs.Bool("json", false, "one JSON object per flow and line instead of a table (-o json)")
	output := fs.String("o", "table", "output: table or json (one JSON object per line)")
	drops := fs.Bool("drops", false, "instead of the flows, stream a sample of the packets the gateway drops (reason, headers, pod) until interrupted")
	rate := fs.String("rate", "", fmt.Sprintf("with --drops: samples a second at most, N or N/s (default %d, at most %d)", defaultDropRate, maxDropRate))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *output {
	case "table":
	case "json":
		*asJSON = true
	default:
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("-o %q: use table or json", *output)}
	}
	if *drops {
		if *ip != "" {
			return &usageError{cmd: fs.Name(), err: errors.New("--egress-ip lists flows; it does not go with --drops")}
		}
		n, err := parseDropRate(*rate)
		if err != nil {
			return &usageError{cmd: fs.Name(), err: err}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return streamDropsFrom(ctx, os.Stdout, *socket, n, *asJSON)
	}
	if *rate != "" {
		return &usageError{cmd: fs.Name(), err: errors.New("--rate paces --drops; give --drops too")}
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

// parseDropRate reads --rate: "N" or "N/s", 1 to maxDropRate; "" is the default.
func parseDropRate(s string) (int, error) {
	if s == "" {
		return defaultDropRate, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(s, "/s"))
	if err != nil || n < 1 || n > maxDropRate {
		return 0, fmt.Errorf("--rate %q: give samples a second as N or N/s, 1 to %d", s, maxDropRate)
	}
	return n, nil
}

// streamDropsFrom streams the gateway's drop samples at rate a second to
// out, as it sends them (JSON lines) or as table rows, until ctx ends or
// the gateway closes the stream.
func streamDropsFrom(ctx context.Context, out io.Writer, socket string, rate int, asJSON bool) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://gateway/drops?rate="+strconv.Itoa(rate), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("no gateway answers on %s (its --flows-socket; --socket names another): %w", socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("the gateway on %s answers %s: %s", socket, resp.Status, b)
	}
	if !asJSON {
		fmt.Fprintf(out, dropRowFormat, "TIME", "REASON", "PROTO", "SOURCE", "DESTINATION", "POD", "LEN", "DETAIL")
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if asJSON {
			if _, err := fmt.Fprintf(out, "%s\n", sc.Bytes()); err != nil {
				return err
			}
			continue
		}
		var e dropEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("the gateway on %s sent a drop sample that does not parse: %w", socket, err)
		}
		writeDropRow(out, &e)
	}
	if ctx.Err() != nil {
		return nil // interrupted: the usual way to stop
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading drop samples from %s: %w", socket, err)
	}
	return errors.New("the gateway closed the stream of drop samples (stopped or restarted)")
}

// dropRowFormat lays out a table row; rows are written as they come, so
// the columns have fixed widths rather than a tabwriter's.
const dropRowFormat = "%-12s  %-22s  %-6s  %-23s  %-23s  %-24s  %5s  %s\n"

func writeDropRow(out io.Writer, e *dropEntry) {
	var detail []string
	if e.ICMPType != nil {
		detail = append(detail, fmt.Sprintf("type %d code %d", *e.ICMPType, *e.ICMPCode))
	}
	if e.Tunnel != "" {
		detail = append(detail, fmt.Sprintf("%s from %v vni %d", e.Tunnel, e.VTEP, *e.VNI))
	}
	if e.Local {
		detail = append(detail, "local port")
	}
	if e.Lost > 0 {
		detail = append(detail, fmt.Sprintf("(%d samples lost: reading too slowly)", e.Lost))
	}
	fmt.Fprintf(out, dropRowFormat, e.Time.Local().Format("15:04:05.000"), e.Reason, orDash(e.Proto), orDash(e.Src), orDash(e.Dst),
		orDash(e.Pod), strconv.Itoa(e.Len), strings.Join(detail, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
