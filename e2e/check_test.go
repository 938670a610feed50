package e2e

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
)

// checkCheck runs the built binary's `egret check` against the cluster
// (issue 29 §3): with the outside server as the echo endpoint, the probe
// pod of every namespace of nss leaves as egret status says (exit 0).
// Then the same probes fetch from an echo server on the outside router's
// address in the nodes' network, which the steer agents never steer
// (nodeCIDRs): the selected namespaces' probes leave unsteered, as their
// node, not as the egress IP the status names, and check must say so
// (exit 1, each such namespace in its table).
func (e *env) checkCheck(nss []testNS) {
	e.t.Helper()
	bin := testbin.Build(e.t, "egret")
	var names, selected []string
	for _, ns := range nss {
		names = append(names, ns.name)
		if len(ns.want) > 0 {
			selected = append(selected, ns.name)
		}
	}
	check := func(url string) (string, int) {
		cmd := exec.Command(bin, "check", "--kubeconfig", filepath.Join(stateDir, "admin.kubeconfig"), "--url", url,
			"--image", plan.registry+"/egret-gw/egret:"+e.version, "--timeout", "3m", "-n", strings.Join(names, ","))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return out.String(), ee.ExitCode()
		} else if err != nil {
			e.t.Fatalf("egret check: %v", err)
		}
		return out.String(), 0
	}
	if out, code := check(serverHTTP(plan.serverIP)); code != 0 {
		e.t.Fatalf("egret check --url %s: exit %d, want 0\n%s", serverHTTP(plan.serverIP), code, out)
	}
	e.t.Logf("egret check: %d namespaces leave as egret status says", len(names))

	// The unsteered path: egret echo-server, as a user runs it outside,
	// on the router's node-network address.
	addr := net.JoinHostPort(plan.routerIP, "18080")
	srv := exec.Command("ip", "netns", "exec", outNS, bin, "echo-server", "--listen", addr)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	nstest.Until(e.t, "egret echo-server on "+addr, 10*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error() + "; " + srvOut.String()
		}
		c.Close()
		return true, ""
	})
	url := "http://" + addr + "/"
	out, code := check(url)
	if code != 1 {
		e.t.Fatalf("egret check --url %s (not steered): exit %d, want 1\n%s", url, code, out)
	}
	for _, ns := range selected {
		if !strings.Contains(out, "\n"+ns+" ") {
			e.t.Errorf("egret check --url %s: namespace %s left unsteered but is not in the mismatches:\n%s", url, ns, out)
		}
	}
	e.t.Logf("egret check: the unsteered path is caught in %d namespaces", len(selected))
}
