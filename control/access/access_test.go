package access

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A refusal, wrapped as the commands wrap it, gets what the command needs
// and the roles; any other error is left as it is.
func TestExplain(t *testing.T) {
	denied := fmt.Errorf("creating the probe pod in namespace shop: %w",
		apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no RBAC")))
	got := Explain("check", denied)
	if !errors.Is(got, denied) || !strings.Contains(got.Error(), "create,get,delete,deletecollection pods") ||
		!strings.Contains(got.Error(), "get pods/log") || !strings.Contains(got.Error(), "list,watch egressips.k8s.ovn.org") ||
		!strings.Contains(got.Error(), "egret-viewer and egret-checker") {
		t.Errorf("Explain(check, forbidden) = %v", got)
	}
	other := errors.New("connection refused")
	if got := Explain("check", other); got != other {
		t.Errorf("Explain(check, %v) = %v", other, got)
	}
	if got := Explain("nope", denied); got != denied {
		t.Errorf("Explain(nope, forbidden) = %v", got)
	}
	if got := Explain("status", nil); got != nil {
		t.Errorf("Explain(status, nil) = %v", got)
	}
}

// Every command names at least one role, and every request says where it goes.
func TestCommands(t *testing.T) {
	for name, c := range Commands {
		if len(c.Roles) == 0 || len(c.Requests) == 0 {
			t.Errorf("%s: roles %v, %d requests", name, c.Roles, len(c.Requests))
		}
		for _, r := range c.Requests {
			if r.Where != Cluster && r.Where != Egret && r.Where != Probed || len(r.Verbs) == 0 || r.Resource == "" {
				t.Errorf("%s: request %+v", name, r)
			}
		}
	}
}
