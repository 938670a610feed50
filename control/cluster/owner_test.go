package cluster

import (
	"testing"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestForeignStatusWriter(t *testing.T) {
	const status = `{"f:status":{".":{},"f:items":{}}}`
	const spec = `{"f:spec":{"f:egressIPs":{}}}`
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	for _, c := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
	}{
		{"none", nil, ""},
		{"Egret's own", []metav1.ManagedFieldsEntry{entry(Component, metav1.ManagedFieldsOperationUpdate, status)}, ""},
		{"kubectl apply of a manifest with status", []metav1.ManagedFieldsEntry{entry("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, status)}, ""},
		{"kubectl edit", []metav1.ManagedFieldsEntry{entry("kubectl-edit", metav1.ManagedFieldsOperationUpdate, status)}, ""},
		{"server-side apply", []metav1.ManagedFieldsEntry{entry("argocd-controller", metav1.ManagedFieldsOperationApply, status)}, ""},
		{"another manager owns only spec", []metav1.ManagedFieldsEntry{entry("ovn-control-plane", metav1.ManagedFieldsOperationUpdate, spec)}, ""},
		{"OVN-Kubernetes owns status", []metav1.ManagedFieldsEntry{
			entry("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, spec),
			entry("ovn-control-plane", metav1.ManagedFieldsOperationUpdate, status)}, "ovn-control-plane"},
		{"broken fields", []metav1.ManagedFieldsEntry{entry("x", metav1.ManagedFieldsOperationUpdate, "{")}, ""},
	} {
		e := &egressv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e", ManagedFields: c.entries}}
		if got := ForeignStatusWriter(e); got != c.want {
			t.Errorf("%s: ForeignStatusWriter = %q, want %q", c.name, got, c.want)
		}
	}
}
