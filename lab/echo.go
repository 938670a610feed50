package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// MaxPatternBytes bounds GET /bytes?n=.
const MaxPatternBytes = 16 << 30

// EchoServer answers with the source address it sees:
//
//	GET  /          → "<ip>:<port>\n"
//	POST /sink      → reads the body, answers "<ip>:<port> <bytes> <sha256 hex>\n"
//	GET  /bytes?n=N → N bytes of Pattern, for downloads
//	UDP             → "<ip>:<port>\n" followed by the datagram's payload
//
// ICMP echo is answered by the kernel of the server's namespace.
type EchoServer struct {
	HTTPAddr string
	UDPAddr  string
	// HTTPAddr6 and UDPAddr6 are optional further listeners (the server's
	// IPv6 address); same answers.
	HTTPAddr6 string
	UDPAddr6  string
	// Also are further addresses answered on the ports of HTTPAddr and
	// UDPAddr (a server's excluded address, Server.Excluded).
	Also []netip.Addr
	Log  *slog.Logger
}

// Run serves until ctx is done.
func (e *EchoServer) Run(ctx context.Context) error {
	if e.Log == nil {
		e.Log = slog.Default()
	}
	var lns []net.Listener
	var pcs []net.PacketConn
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
		for _, pc := range pcs {
			pc.Close()
		}
	}
	httpAddrs, udpAddrs := []string{e.HTTPAddr, e.HTTPAddr6}, []string{e.UDPAddr, e.UDPAddr6}
	if len(e.Also) > 0 {
		hp, err1 := netip.ParseAddrPort(e.HTTPAddr)
		up, err2 := netip.ParseAddrPort(e.UDPAddr)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("echo server: further addresses need numeric HTTP and UDP addresses: %w", err)
		}
		for _, a := range e.Also {
			httpAddrs = append(httpAddrs, netip.AddrPortFrom(a, hp.Port()).String())
			udpAddrs = append(udpAddrs, netip.AddrPortFrom(a, up.Port()).String())
		}
	}
	for _, a := range httpAddrs {
		if a == "" && len(lns) > 0 {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeAll()
			return fmt.Errorf("echo server: %w", err)
		}
		lns = append(lns, ln)
	}
	for _, a := range udpAddrs {
		if a == "" && len(pcs) > 0 {
			continue
		}
		pc, err := net.ListenPacket("udp", a)
		if err != nil {
			closeAll()
			return fmt.Errorf("echo server: %w", err)
		}
		pcs = append(pcs, pc)
	}
	srv := &http.Server{Handler: echoHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, len(lns)+len(pcs))
	var addrs []string
	for _, ln := range lns {
		go func() { errc <- srv.Serve(ln) }()
		addrs = append(addrs, "tcp "+ln.Addr().String())
	}
	for _, pc := range pcs {
		go func() { errc <- serveUDP(pc) }()
		addrs = append(addrs, "udp "+pc.LocalAddr().String())
	}
	e.Log.Info("echo server listening", "on", addrs)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	closeAll()
	srv.Close()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func echoHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, r.RemoteAddr)
	})
	mux.HandleFunc("POST /sink", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %d %s\n", r.RemoteAddr, n, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 || n > MaxPatternBytes {
			http.Error(w, fmt.Sprintf("n must be a byte count from 0 to %d", int64(MaxPatternBytes)), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.Copy(w, Pattern(n))
	})
	return mux
}

func serveUDP(pc net.PacketConn) error {
	buf := make([]byte, 65536)
	out := make([]byte, 0, 65536+64)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		out = append(append(append(out[:0], from.String()...), '\n'), buf[:n]...)
		if len(out) > 65507 {
			out = out[:65507]
		}
		pc.WriteTo(out, from)
	}
}

// Pattern is a reader of n pseudo-random bytes from a fixed seed, the
// content of GET /bytes and of the tests' uploads.
func Pattern(n int64) io.Reader {
	return io.LimitReader(&patternReader{r: rand.NewChaCha8([32]byte{'e', 'g', 'r', 'e', 't'})}, n)
}

type patternReader struct{ r *rand.ChaCha8 }

func (p *patternReader) Read(b []byte) (int, error) { return p.r.Read(b) }
