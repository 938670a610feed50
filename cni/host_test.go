package cni

import (
	"strings"
	"testing"
)

// A network the node binds to namespaces takes pods of those only; others
// take every namespace, as before.
func TestAdmitNamespace(t *testing.T) {
	hc, err := ParseHostConfig([]byte(`{"networkNamespaces":{"db-router":["payments","billing"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		network, ns string
		ok          bool
	}{
		{"db-router", "payments", true},
		{"db-router", "billing", true},
		{"db-router", "tenant-b", false},
		{"db-router", "", false},
		{"other", "tenant-b", true},
	} {
		if err := hc.admitNamespace(c.network, c.ns); (err == nil) != c.ok {
			t.Errorf("network %q, namespace %q: %v, want ok=%v", c.network, c.ns, err, c.ok)
		}
	}
	for _, bad := range []string{
		`{"networkNamespaces":{"db-router":[]}}`,
		`{"networkNamespaces":{"":["a"]}}`,
		`{"networkNamespaces":{"db-router":["Not_A_Namespace"]}}`,
	} {
		if _, err := ParseHostConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "networkNamespaces") {
			t.Errorf("%s: %v, want a networkNamespaces error", bad, err)
		}
	}
}
