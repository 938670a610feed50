package cni

import (
	"strings"
	"testing"
)

// A network the node binds to namespaces takes pods of those only; a
// Kubernetes pod joins no network the node does not bind (the entry "*"
// binds the others); a caller naming no namespace, no Kubernetes pod, is
// refused only by a binding to named namespaces.
func TestAdmitNamespace(t *testing.T) {
	for _, c := range []struct {
		host, network, ns string
		ok                bool
	}{
		{`{"networkNamespaces":{"db-router":["payments","billing"]}}`, "db-router", "payments", true},
		{`{"networkNamespaces":{"db-router":["payments","billing"]}}`, "db-router", "billing", true},
		{`{"networkNamespaces":{"db-router":["payments","billing"]}}`, "db-router", "tenant-b", false},
		{`{"networkNamespaces":{"db-router":["payments","billing"]}}`, "db-router", "", false},
		// Not listed: refused for a pod of any namespace (issue 33).
		{`{"networkNamespaces":{"db-router":["payments","billing"]}}`, "other", "tenant-b", false},
		{`{}`, "other", "payments", false},
		{`{}`, "other", "", true},
		// "*" as the network: every network not listed by name.
		{`{"networkNamespaces":{"*":["payments"],"db-router":["billing"]}}`, "other", "payments", true},
		{`{"networkNamespaces":{"*":["payments"],"db-router":["billing"]}}`, "other", "tenant-b", false},
		{`{"networkNamespaces":{"*":["payments"],"db-router":["billing"]}}`, "db-router", "payments", false},
		{`{"networkNamespaces":{"*":["payments"]}}`, "other", "", false},
		// "*" as the namespace: every namespace, and callers naming none.
		{`{"networkNamespaces":{"db-router":["*"]}}`, "db-router", "tenant-b", true},
		{`{"networkNamespaces":{"db-router":["*"]}}`, "db-router", "", true},
		{`{"networkNamespaces":{"db-router":["*"]}}`, "other", "tenant-b", false},
		{`{"networkNamespaces":{"*":["*"]}}`, "other", "tenant-b", true},
	} {
		hc, err := ParseHostConfig([]byte(c.host))
		if err != nil {
			t.Fatal(err)
		}
		if err := hc.admitNamespace(c.network, c.ns); (err == nil) != c.ok {
			t.Errorf("%s: network %q, namespace %q: %v, want ok=%v", c.host, c.network, c.ns, err, c.ok)
		}
	}
	for _, bad := range []string{
		`{"networkNamespaces":{"db-router":[]}}`,
		`{"networkNamespaces":{"":["a"]}}`,
		`{"networkNamespaces":{"db-router":["Not_A_Namespace"]}}`,
		`{"networkNamespaces":{"db-router":["pay*"]}}`,
	} {
		if _, err := ParseHostConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), "networkNamespaces") {
			t.Errorf("%s: %v, want a networkNamespaces error", bad, err)
		}
	}
}
