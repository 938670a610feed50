package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

var testRewrite = rewrite{dstMAC: [6]byte{2, 0, 0, 0, 0, 0x77}, srcMAC: [6]byte{2, 0, 0, 0, 0, 2}, egress: [4]byte{192, 0, 2, 100}}

// checkReflected checks f is what a gateway would send for the generator's
// frame seq: to the router from the gateway, from the egress IP, every
// checksum valid, the stamp intact.
func checkReflected(f []byte, seq uint64) error {
	if !bytes.Equal(f[0:6], testRewrite.dstMAC[:]) {
		return fmt.Errorf("destination MAC %x", f[0:6])
	}
	st, ok := parseOut(f)
	if !ok || st.src != netip.AddrFrom4(testRewrite.egress) || st.seq != seq {
		return fmt.Errorf("stamp %+v (ok %v), want seq %d from %v", st, ok, seq, netip.AddrFrom4(testRewrite.egress))
	}
	if !sumOK(f[ethLen:]) {
		return fmt.Errorf("bad checksum in %x", f)
	}
	return nil
}

func TestRewrite(t *testing.T) {
	for _, size := range []int{64, 1500} {
		buf := make([]byte, 2048)
		n := testWire.build(buf, size, 7, 42, 1000)
		f := buf[:n]
		rw := testRewrite
		off, ok := rw.apply(f)
		if !ok || off != outerLen {
			t.Fatalf("size %d: apply = %d, %v; want %d, true", size, off, ok, outerLen)
		}
		if err := checkReflected(f[off:], 42); err != nil {
			t.Errorf("size %d: %v", size, err)
		}
		if !bytes.Equal(f[off+6:off+12], testRewrite.srcMAC[:]) {
			t.Errorf("size %d: source MAC %x", size, f[off+6:off+12])
		}
	}
	// Not VXLAN (the reply direction's frame from the server): untouched.
	buf := make([]byte, 2048)
	n := testBack.buildReply(buf, 64, 7, 42, 1000)
	before := bytes.Clone(buf[:n])
	rw := testRewrite
	if _, ok := rw.apply(buf[:n]); ok || !bytes.Equal(buf[:n], before) {
		t.Errorf("a frame that is not VXLAN was taken (%v) or changed", ok)
	}
	if _, ok := rw.apply(buf[:20]); ok {
		t.Error("a 20-byte frame was taken")
	}
}

// TestReflectors runs each reflector on one end of a veth pair and sends
// the generator's VXLAN frames from the other: each must come back
// rewritten as a gateway would send it to the router.
func TestReflectors(t *testing.T) {
	for _, mode := range []string{sideAFXDPReflector, sideXDPReflector} {
		t.Run(mode, func(t *testing.T) {
			d0, g0 := nstest.Pair(t, "d0", netip.MustParsePrefix("192.0.2.21/24"), "g0", netip.MustParsePrefix("192.0.2.11/24"))
			if mode == sideXDPReflector {
				if err := g0.NS.Do(func() error {
					c, err := peerXDP("g0")
					if err == nil {
						t.Cleanup(func() { c.Close() })
					}
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			raw := g0.NS.OpenRaw(t, "g0")
			pinDir, err := os.MkdirTemp("/sys/fs/bpf", "egret-test-reflector-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(pinDir) })
			cfg := reflectorConfig{mode: mode, dev: "d0", vtep: d0.Addr.Addr(), rw: testRewrite, pinDir: pinDir}
			done, ready, exited := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				exited <- d0.NS.Do(func() error { return runReflector(cfg, done, func() { close(ready) }) })
			}()
			defer func() {
				close(done)
				if err := <-exited; err != nil {
					t.Error(err)
				}
			}()
			select {
			case <-ready:
			case err := <-exited:
				t.Fatalf("reflector exited: %v", err)
			}
			w := testWire
			w.outerSrc, w.outerDst = g0.Addr.Addr(), d0.Addr.Addr()
			copy(w.outerSrcMAC[:], g0.MAC)
			copy(w.outerDstMAC[:], d0.MAC)
			const n = 64
			buf := make([]byte, 2048)
			for i := range uint64(n) {
				if err := raw.Send(buf[:w.build(buf, 64, i, i, 1000)]); err != nil {
					t.Fatal(err)
				}
			}
			got := map[uint64]bool{}
			for len(got) < n {
				f := raw.Next(2 * time.Second)
				if f == nil {
					break
				}
				if !bytes.Equal(f[0:6], testRewrite.dstMAC[:]) {
					continue // the frames sent, seen by the tap, and kernel chatter
				}
				st, _ := parseOut(f)
				if err := checkReflected(f, st.seq); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(f[6:12], d0.MAC) {
					t.Fatalf("source MAC %x, want the reflector's interface %v", f[6:12], d0.MAC)
				}
				got[st.seq] = true
			}
			if len(got) != n {
				var stats []byte
				d0.NS.Do(func() error { stats, _ = exec.Command("ethtool", "-S", "d0").CombinedOutput(); return nil })
				g0.NS.Do(func() error {
					s, _ := exec.Command("ip", "-s", "-d", "link", "show", "g0").CombinedOutput()
					stats = append(stats, s...)
					s, _ = exec.Command("ethtool", "-k", "g0").CombinedOutput()
					stats = append(stats, s...)
					return nil
				})
				t.Fatalf("%d of %d frames came back rewritten; d0's counters:\n%s", len(got), n, stats)
			}
		})
	}
}

// TestSummaryCeiling: the summary keeps its first line and adds Egret over
// the AF_XDP reflector; the ceiling table has each side over each reflector.
func TestSummaryCeiling(t *testing.T) {
	sc := scenario{Name: "est-10k", Underlay: "ipv4"}
	res := func(mode string, ndr, pdr float64) *result {
		return &result{Scenario: sc, Mode: mode, NDR: searchResult{Rate: ndr}, PDR: searchResult{Rate: pdr}}
	}
	rep := &report{Results: []*result{res("kernel", 100, 200), res("egret", 150, 220), res(sideAFXDPReflector, 300, 400), res(sideXDPReflector, 600, 800)}}
	want := "egret/kernel: NDR 1.50x, PDR 1.10x, CPS n/ax, p99 latency n/ax\negret/afxdp-reflector: NDR 0.50x, PDR 0.55x"
	if got := rep.summary(); got != want {
		t.Errorf("summary:\n%s\nwant\n%s", got, want)
	}
	tab := rep.tables()
	for _, row := range []string{"| est-10k | egret/afxdp-reflector | 0.50x | 0.55x |", "| est-10k | kernel/xdp-reflector | 0.17x | 0.25x |"} {
		if !strings.Contains(tab, row) {
			t.Errorf("tables lack %q:\n%s", row, tab)
		}
	}
	rep.Results = rep.Results[:2]
	if got := rep.summary(); !strings.HasSuffix(got, "\negret/afxdp-reflector: NDR n/ax, PDR n/ax") {
		t.Errorf("without a reflector the summary reads %q", got)
	}
}
