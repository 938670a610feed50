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
// code 7 and gets no interface; a pod of payments gets one.
func TestNetworkNamespaces(t *testing.T) {
	l := newLab(t, true)
	dir := pluginDirWith(t, `{"allowMasterTypes":["veth"],"networkNamespaces":{"db":["payments"]}}`)
	conf := `{"cniVersion":"1.0.0","name":"db","type":"egress-router","ip":{"addresses":["192.0.2.99/24"]}}`

	out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "ADD", conf, "K8S_POD_NAMESPACE=tenant-b;K8S_POD_NAME=x")
	if err == nil {
		t.Fatalf("ADD from namespace tenant-b succeeded: %s", out)
	}
	var e types.Error
	if jerr := json.Unmarshal(out, &e); jerr != nil {
		t.Fatalf("stdout is not a CNI error: %q", out)
	}
	if e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "networkNamespaces") || !strings.Contains(e.Msg, "tenant-b") {
		t.Errorf("refusal %d %q; want code 7 naming networkNamespaces and the pod's namespace", e.Code, e.Msg)
	}
	if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
		t.Fatal("the refused pod got net1")
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
