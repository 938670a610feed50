package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/egret-gw/egret/lab"
)

// fault is one fault the harness injects and then clears.
type fault struct {
	name string
	// hold is how long the fault lasts in the full run; short caps it.
	hold time.Duration
	// short: part of the short variant (TestChaos).
	short bool
	// inject starts the fault in the lab and returns what clears it.
	inject func(l *lab.Lab, st *lab.Status) (clear func() error, err error)
	// noMove: no egress IP may move while the fault lasts (the status
	// must not change); note, if set, adds a line of what the fault did.
	noMove bool
	note   func() string
}

// faults is the list as the managed lab can play it
// (docs/reliability.md says what each maps to and which it cannot).
func faults() []fault {
	return []fault{
		{name: "gateway partitioned from the controller", hold: 20 * time.Second, short: true,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				gw := busiest(st)
				return partition(l.Spec.NS(gw), l.Spec.Controller.IP)
			}},
		{name: "gateway partitioned from the API server", hold: 20 * time.Second, short: true,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				return cutObjects(l, busiest(st))
			}},
		{name: "gateway partitioned from both", hold: 20 * time.Second, short: true,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				gw := busiest(st)
				healAPI, err := cutObjects(l, gw)
				if err != nil {
					return nil, err
				}
				healCtl, err := partition(l.Spec.NS(gw), l.Spec.Controller.IP)
				if err != nil {
					healAPI()
					return nil, err
				}
				return func() error { return errors.Join(healCtl(), healAPI()) }, nil
			}},
		{name: "controller killed and restarted", hold: 5 * time.Second, short: true,
			inject: func(l *lab.Lab, _ *lab.Status) (func() error, error) {
				if err := l.KillController(); err != nil {
					return nil, err
				}
				return l.StartController, nil
			}},
		{name: "API server stopped", hold: 60 * time.Second, short: true,
			inject: func(l *lab.Lab, _ *lab.Status) (func() error, error) {
				objs := lab.ObjectsDir(l.RunDir())
				away := objs + ".chaos-away"
				if err := os.Rename(objs, away); err != nil {
					return nil, fmt.Errorf("taking the object directory away: %w", err)
				}
				return func() error { return os.Rename(away, objs) }, nil
			}},
		{name: "worker partitioned from one gateway", hold: 20 * time.Second,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				return partition(l.Spec.NS(l.Spec.Workers[0].Name), gatewayIP(l, busiest(st)))
			}},
		{name: "gateway node rebooted", hold: 2 * time.Second, short: true,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				gw := busiest(st)
				if err := l.KillGateway(gw); err != nil {
					return nil, err
				}
				return func() error { return l.StartGateway(gw) }, nil
			}},
		{name: "gateway and worker starved", hold: 5 * time.Second,
			inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
				pids := []int{gatewayPID(st, busiest(st))}
				if len(st.Steer) > 0 {
					pids = append(pids, st.Steer[0].PID)
				}
				return freeze(pids)
			}},
		{name: "every gateway starved", hold: 5 * time.Second, short: true,
			inject: func(_ *lab.Lab, st *lab.Status) (func() error, error) {
				var pids []int
				for _, g := range st.Gateways {
					pids = append(pids, g.PID)
				}
				return freeze(pids)
			}},
		{name: "controller starved", hold: 5 * time.Second, short: true,
			inject: func(_ *lab.Lab, st *lab.Status) (func() error, error) {
				return freeze([]int{st.Controller.PID})
			}},
		{name: "fabric 5% loss, 200 ms delay", hold: 60 * time.Second, short: true,
			inject: func(l *lab.Lab, _ *lab.Status) (func() error, error) { return netem(l) }},
		hostileFault(),
	}
}

// hostileFault is a pod holding hostileConns connections to every port
// of every gateway (hostile): nothing may move meanwhile.
func hostileFault() fault {
	var cnt *hostileCount
	return fault{name: "hostile pod, 150 connections per port", hold: 20 * time.Second, short: true, noMove: true,
		inject: func(l *lab.Lab, st *lab.Status) (func() error, error) {
			clear, c, err := hostile(l, st)
			cnt = c
			return clear, err
		},
		note: func() string {
			if cnt == nil {
				return ""
			}
			return cnt.String()
		}}
}

// busiest is the gateway that hosts the most IPv4 egress IPs (the first by
// name among equals).
func busiest(st *lab.Status) string {
	best, n := "", -1
	gws := slices.Clone(st.Gateways)
	slices.SortFunc(gws, func(a, b lab.GatewayStatus) int { return strings.Compare(a.Name, b.Name) })
	for _, g := range gws {
		if c := v4Count(g); c > n {
			best, n = g.Name, c
		}
	}
	return best
}

// v4Count is how many IPv4 egress IPs gateway g hosts.
func v4Count(g lab.GatewayStatus) int {
	c := 0
	for _, ip := range g.EgressIPs {
		if ip.Is4() {
			c++
		}
	}
	return c
}

func gatewayIP(l *lab.Lab, gw string) netip.Addr {
	if g := l.Spec.Gateway(gw); g != nil {
		return g.IP
	}
	return netip.Addr{}
}

func gatewayPID(st *lab.Status, gw string) int {
	for _, g := range st.Gateways {
		if g.Name == gw {
			return g.PID
		}
	}
	return 0
}

// partition drops everything between namespace ns and peer, both ways,
// with an nftables table of its own that clearing deletes.
func partition(ns string, peer netip.Addr) (func() error, error) {
	if !peer.IsValid() {
		return nil, fmt.Errorf("no peer address to cut %s from", ns)
	}
	rules := fmt.Sprintf(`table inet egret_chaos {
	chain in { type filter hook input priority -300; ip saddr %[1]s drop; }
	chain out { type filter hook output priority -300; ip daddr %[1]s drop; }
}
`, peer)
	if err := nsRun(ns, rules, "nft", "-f", "-"); err != nil {
		return nil, err
	}
	return func() error { return nsRun(ns, "", "nft", "delete", "table", "inet", "egret_chaos") }, nil
}

// freeze stops pids with SIGSTOP (a process starved of CPU) until cleared.
func freeze(pids []int) (func() error, error) {
	for _, p := range pids {
		if p <= 0 {
			return nil, fmt.Errorf("no process to starve in %v", pids)
		}
	}
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("SIGSTOP %d: %w", p, err)
		}
	}
	return func() error {
		var errs []string
		for _, p := range pids {
			if err := syscall.Kill(p, syscall.SIGCONT); err != nil {
				errs = append(errs, fmt.Sprintf("SIGCONT %d: %v", p, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}, nil
}

// netem delays every frame the fabric's bridge forwards by 200 ms and
// drops 5 % of them: a qdisc on each bridge port, in the fabric namespace.
// A kernel without the netem qdisc (sch_netem) gets the loss alone, from
// an nftables rule on the bridge's forward hook, and the run says so.
func netem(l *lab.Lab) (func() error, error) {
	ns := l.Spec.NS("fabric")
	ports := []string{l.Spec.Router.Name, l.Spec.Controller.Name}
	for _, w := range l.Spec.Workers {
		ports = append(ports, w.Name)
	}
	for _, g := range l.Spec.Gateways {
		ports = append(ports, g.Name)
	}
	var added []string
	clear := func() error {
		var errs []string
		for _, p := range added {
			if err := nsRun(ns, "", "tc", "qdisc", "del", "dev", p, "root"); err != nil && !strings.Contains(err.Error(), "No such file") {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	for _, p := range ports {
		err := nsRun(ns, "", "tc", "qdisc", "add", "dev", p, "root", "netem", "loss", "5%", "delay", "200ms")
		if err != nil && len(added) == 0 && strings.Contains(err.Error(), "qdisc kind is unknown") {
			fmt.Fprintln(os.Stderr, "chaos: this kernel has no netem qdisc (sch_netem): the fabric fault drops 5 % of frames with nftables and delays none")
			return randomLoss(ns, 5)
		}
		if err != nil {
			clear()
			return nil, err
		}
		added = append(added, p)
	}
	return clear, nil
}

// randomLoss drops pct % of the frames the bridge in ns forwards, chosen
// at random, until the returned function removes the rule.
func randomLoss(ns string, pct int) (func() error, error) {
	const table = "egret-chaos"
	rule := fmt.Sprintf("table bridge %s {\n\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n\t\tnumgen random mod 100 < %d drop\n\t}\n}\n", table, pct)
	if err := nsRun(ns, rule, "nft", "-f", "-"); err != nil {
		return nil, err
	}
	return func() error { return nsRun(ns, "", "nft", "delete", "table", "bridge", table) }, nil
}

// nsRun runs a command in network namespace ns with stdin, naming it and
// its output in the error.
func nsRun(ns, stdin, name string, args ...string) error {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cutObjects takes gateway gw's own link to the object directory away (the
// lab's API server, lab.GatewayObjectsDir), so that it alone can neither
// list the objects nor read the status, while the controller and the other
// gateways still can; clearing puts the link back.
func cutObjects(l *lab.Lab, gw string) (func() error, error) {
	link := lab.GatewayObjectsDir(l.RunDir(), gw)
	away := link + ".chaos-away"
	if err := os.Rename(link, away); err != nil {
		return nil, fmt.Errorf("taking %s's object directory away: %w", gw, err)
	}
	return func() error { return os.Rename(away, link) }, nil
}
