package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egret-gw/egret/bench/dist"
	"github.com/egret-gw/egret/lab"
)

type options struct {
	out   string
	kills int
	egret string
	conns int
	wait  time.Duration
}

// Kill is one gateway kill.
type Kill struct {
	Gateway string   `json:"gateway"`
	Moved   []string `json:"moved"` // egress IPs it hosted
	// StatusMs: kill → the status places every moved IP elsewhere.
	StatusMs float64 `json:"status_ms"`
	// NewConnMs: kill → the first new connection served with a moved IP.
	NewConnMs float64 `json:"new_conn_ms"`
	// OldConnMs: kill → the next answer of each long-lived connection
	// that left through the killed gateway, one per connection.
	OldConnMs []float64 `json:"old_conn_ms"`
	// OldBroken counts those connections that ended (reset, or no answer
	// within -wait) instead.
	OldBroken int `json:"old_broken"`
	// NewAttempts and NewFailed count the new connections tried meanwhile.
	NewAttempts int `json:"new_attempts"`
	NewFailed   int `json:"new_failed"`
}

func run(o options) error {
	if o.kills < 1 {
		return fmt.Errorf("-kills %d: give at least one", o.kills)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (it builds network namespaces)")
	}
	for _, tool := range []string{"ip", "nft", "bridge", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing; run make deps", tool)
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("creating the report folder: %w", err)
	}
	dir, err := os.MkdirTemp("", "egret-bench-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := dist.EgretBinary(o.egret, dir)
	if err != nil {
		return err
	}
	spec, err := lab.DefaultSpec("efo" + strconv.FormatInt(int64(os.Getpid()), 36))
	if err != nil {
		return err
	}
	impl, err := lab.NewImpl(lab.ModeManaged, bin)
	if err != nil {
		return err
	}
	m, ok := impl.(lab.Managed)
	if !ok {
		return fmt.Errorf("lab mode %s is not the managed mode", lab.ModeManaged)
	}
	holdDown := lab.DefaultHoldDown
	if m.HoldDown > 0 {
		holdDown = m.HoldDown
	}
	res := &Result{Kills: []Kill{}, ReachabilitySeconds: lab.DefaultReachabilitySeconds, Machine: machine()}
	if m.ReachabilityTotalTimeoutSeconds > 0 {
		res.ReachabilitySeconds = m.ReachabilityTotalTimeoutSeconds
	}
	fmt.Printf("failover: managed lab %s, %d kills (SIGKILL of `egret gateway`), reachability timeout %d s, hold-down %v\n",
		spec.Name, o.kills, res.ReachabilitySeconds, holdDown)
	l := &lab.Lab{Spec: spec, Impl: impl, Binary: bin}
	if err := l.Up(); err != nil {
		lab.Down("", spec.Name)
		return fmt.Errorf("bringing the lab up: %w", err)
	}
	defer lab.Down("", spec.Name)
	server := netip.AddrPortFrom(spec.Server.IP, lab.HTTPPort).String()

	start := time.Now()
	for k := range o.kills {
		st, err := l.Status()
		if err != nil {
			return err
		}
		gw := victim(st, k)
		if gw == "" {
			return fmt.Errorf("kill %d: no gateway hosts an IPv4 egress IP: %v", k+1, st.Assignment)
		}
		var ips []netip.Addr
		for _, a := range st.Assignment {
			if a.Node == gw && a.IP.Is4() {
				ips = append(ips, a.IP)
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		olds, err := oldConns(st, server, ips, o.conns, stop, &wg, o.wait)
		if err != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("kill %d: opening the long-lived connections: %w", k+1, err)
		}
		time.Sleep(300 * time.Millisecond) // a few exchanges on each before the kill
		fr, err := l.Failover(gw, o.wait)
		if err != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("kill %d of %s: %w", k+1, gw, err)
		}
		kill := Kill{Gateway: gw, StatusMs: fr.StatusSeconds * 1000, NewConnMs: fr.TrafficSeconds * 1000,
			NewAttempts: fr.Attempts, NewFailed: fr.Failed, OldConnMs: []float64{}}
		for _, mv := range fr.Moved {
			kill.Moved = append(kill.Moved, mv.IP.String())
		}
		deadline := fr.Killed.Add(o.wait)
		for _, c := range olds {
			for {
				// Answers before the process was gone may have passed it.
				at, ok, err := c.resumed(fr.Dead)
				if ok {
					kill.OldConnMs = append(kill.OldConnMs, float64(at.Sub(fr.Killed))/float64(time.Millisecond))
					break
				}
				if err != nil || time.Now().After(deadline) {
					kill.OldBroken++
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		close(stop)
		wg.Wait()
		res.Kills = append(res.Kills, kill)
		fmt.Printf("  kill %2d/%d %s (%s): status moved %.0f ms, new connection %.0f ms, old connections %s%s\n",
			k+1, o.kills, gw, strings.Join(kill.Moved, " "), kill.StatusMs, kill.NewConnMs, msList(kill.OldConnMs), brokenNote(kill.OldBroken))

		// The gateway comes back; wait out the hold-down so that the next
		// kill meets three eligible gateways again.
		if err := l.StartGateway(gw); err != nil {
			return fmt.Errorf("restarting %s after kill %d: %w", gw, k+1, err)
		}
		time.Sleep(holdDown + time.Second)
		if _, err := l.WaitAssigned(20 * time.Second); err != nil {
			return fmt.Errorf("after kill %d: %w", k+1, err)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.summarize()
	res.Machine.LoadEnd = dist.LoadAvg()
	return write(o.out, res)
}

// victim picks the gateway to kill for kill k: the gateways take turns,
// skipping any that hosts no IPv4 egress IP.
func victim(st *lab.Status, k int) string {
	var gws []string
	for _, g := range st.Gateways {
		gws = append(gws, g.Name)
	}
	slices.Sort(gws)
	for i := range gws {
		g := gws[(k+i)%len(gws)]
		for _, a := range st.Assignment {
			if a.Node == g && a.IP.Is4() {
				return g
			}
		}
	}
	return ""
}

func msList(l []float64) string {
	if len(l) == 0 {
		return "none through it"
	}
	var s []string
	for _, x := range l {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " ") + " ms"
}

func brokenNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d broken", n)
}

func machine() Machine {
	return Machine{CPUs: runtime.NumCPU(), LoadAvg: dist.LoadAvg()}
}
