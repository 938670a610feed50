package cni

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestNetworkNamespaces runs the plugin binary with a node that binds the
// network "db" to namespace payments: a pod of another namespace (Multus
// lets it name payments' NetworkAttachmentDefinition) is refused with
// code 7 and gets no interface; a pod of payments gets one. A network the
// node binds to no namespace takes no Kubernetes pod, not even one of
// payments (issue 33: Multus lets any namespace name it), until the node
// binds it, here with "*" for every network and namespace.
func TestNetworkNamespaces(t *testing.T) {
	l := newLab(t, true)
	dir := pluginDirWith(t, `{"allowMasterTypes":["veth"],"networkNamespaces":{"db":["payments"]}}`)
	conf := `{"cniVersion":"1.0.0","name":"db","type":"egress-router","ip":{"addresses":["192.0.2.99/24"]}}`

	out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "ADD", conf, "K8S_POD_NAMESPACE=tenant-b;K8S_POD_NAME=x")
	if err == nil {
		t.Fatalf("ADD from namespace tenant-b succeeded: %s", out)
	}
	refused(t, l, out, "tenant-b")

	other := `{"cniVersion":"1.0.0","name":"other","type":"egress-router","ip":{"addresses":["192.0.2.98/24"]}}`
	out, err = runPluginFrom(t, l, dir, l.Pod.Path(), "ADD", other, "K8S_POD_NAMESPACE=payments;K8S_POD_NAME=x")
	if err == nil {
		t.Fatalf("ADD of a network bound to no namespace succeeded: %s", out)
	}
	refused(t, l, out, `network "other" is bound to no namespace`)
	every := pluginDirWith(t, `{"allowMasterTypes":["veth"],"networkNamespaces":{"*":["*"],"db":["payments"]}}`)
	if out, err := runPluginFrom(t, l, every, l.Pod.Path(), "ADD", other, "K8S_POD_NAMESPACE=tenant-b;K8S_POD_NAME=x"); err != nil {
		t.Fatalf("ADD of network other with every network open: %v %s", err, out)
	}
	if out, err := runPluginFrom(t, l, every, l.Pod.Path(), "DEL", other, "K8S_POD_NAMESPACE=tenant-b;K8S_POD_NAME=x"); err != nil {
		t.Fatalf("DEL: %v %s", err, out)
	}
	if out, err := runPluginFrom(t, l, every, l.Pod.Path(), "ADD", conf, "K8S_POD_NAMESPACE=tenant-b;K8S_POD_NAME=x"); err == nil {
		t.Fatalf("ADD of db from tenant-b with only other networks open succeeded: %s", out)
	} else {
		refused(t, l, out, "tenant-b")
	}

	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "ADD", conf, "K8S_POD_NAMESPACE=payments;K8S_POD_NAME=x"); err != nil {
		t.Fatalf("ADD from namespace payments: %v %s", err, out)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err != nil {
		t.Errorf("the pod of payments has no net1: %v", err)
	}
	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "DEL", conf, "K8S_POD_NAMESPACE=payments;K8S_POD_NAME=x"); err != nil {
		t.Errorf("DEL: %v %s", err, out)
	}
}

// refused checks that out is a CNI error of code 7 naming words, and that the
// pod has no net1.
func refused(t *testing.T, l *lab, out []byte, words string) {
	t.Helper()
	var e types.Error
	if jerr := json.Unmarshal(out, &e); jerr != nil {
		t.Fatalf("stdout is not a CNI error: %q", out)
	}
	if e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "networkNamespaces") || !strings.Contains(e.Msg, words) {
		t.Errorf("refusal %d %q; want code 7 naming networkNamespaces and %q", e.Code, e.Msg, words)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
		t.Fatal("the refused pod got net1")
	}
}
