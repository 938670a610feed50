package e2e

import (
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egret-gw/egret/control/identity"
)

// checkSelfLabel (issue 33): a worker that makes itself egress-assignable,
// with its own kubelet's credentials as a compromised node would, gets no
// gateway: the label is taken (a kubelet may set it on its own Node), the
// admin-owned label the gateway DaemonSet and the controller select is
// refused (NodeRestriction), no gateway pod is on it, its kubelet may not
// read the flow sync key nor the identity CA's key (the node authorizer
// gives a kubelet only the Secrets of pods bound to it), a certificate it
// asks the gateway signer for is refused, and no egress IP is placed on it.
func (e *env) checkSelfLabel() {
	e.t.Helper()
	const w = "w1"
	kc := filepath.Join(stateDir, "nodes", w, "kubelet.kubeconfig")
	as := func(args ...string) (string, error) {
		return e.run(e.kubectlBin, append([]string{"--kubeconfig", kc}, args...)...)
	}
	if out, err := as("label", "node", w, "k8s.ovn.org/egress-assignable=", "--overwrite"); err != nil {
		e.t.Fatalf("self-label: node %s's kubelet could not label its Node egress-assignable (the attack this checks needs it): %v\n%s", w, err, out)
	}
	e.t.Cleanup(func() { e.kubectlErr("label", "node", w, "k8s.ovn.org/egress-assignable-") })
	if out, err := as("label", "node", w, gatewayLabel+"=true", "--overwrite"); err == nil {
		e.kubectlErr("label", "node", w, gatewayLabel+"-")
		e.t.Errorf("self-label: node %s's kubelet set %s on its own Node: %s", w, gatewayLabel, out)
	} else if !strings.Contains(out, "forbidden") && !strings.Contains(out, "not allowed") {
		e.t.Errorf("self-label: setting %s failed, but not as NodeRestriction refuses: %v\n%s", gatewayLabel, err, out)
	}
	for _, secret := range []string{"egret-flow-sync", identity.CAName} {
		if out, err := as("-n", "egret-system", "get", "secret", secret, "-o", "name"); err == nil || !strings.Contains(out, "forbidden") {
			e.t.Errorf("self-label: node %s's kubelet reads the Secret %s (err %v): %s", w, secret, err, out)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		e.t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, _, denied := e.requestCert(cs, w); !denied {
		e.t.Errorf("self-label: node %s's kubelet got a gateway certificate", w)
	}
	if out := e.kubectl("-n", "egret-system", "get", "pods", "-l", "app.kubernetes.io/name=egret-gateway",
		"--field-selector", "spec.nodeName="+w, "-o", "name"); strings.TrimSpace(out) != "" {
		e.t.Errorf("self-label: a gateway pod runs on %s: %s", w, out)
	}
	if got := e.kubectl("-n", "egret-system", "get", "daemonset", "egret-gateway", "-o", "jsonpath={.status.desiredNumberScheduled}"); got != "2" {
		e.t.Errorf("self-label: the gateway DaemonSet wants %s pods, want 2 (gw1, gw2)", got)
	}
	for ip, n := range e.eipStatus() {
		if n == w {
			e.t.Errorf("self-label: egress IP %s is placed on %s", ip, w)
		}
	}
	e.kubectl("label", "node", w, "k8s.ovn.org/egress-assignable-")
}
