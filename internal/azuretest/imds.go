package azuretest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"
)

// VM is what the instance metadata service says of the virtual machine it
// runs on.
type VM struct {
	Subscription, ResourceGroup, Name string
	IP                                string       // primary private IPv4 address
	Subnet                            netip.Prefix // of the primary interface
}

// ID is the VM's resource ID.
func (v VM) ID() string {
	return "/subscriptions/" + v.Subscription + "/resourceGroups/" + v.ResourceGroup + "/providers/Microsoft.Compute/virtualMachines/" + v.Name
}

// StartIdentity runs a managed identity endpoint and an instance metadata
// service on one loopback server, and returns its base URL for the IMDS
// address. The SDK's default credential chain finds the identity through
// the environment variables of a managed identity host (IDENTITY_ENDPOINT,
// IDENTITY_HEADER: azidentity's own managed identity code, as the address
// of the VM's IMDS token endpoint is fixed in the SDK); no other credential
// of the chain is configured. The token is Token, for any resource.
func StartIdentity(t *testing.T, vm VM) string {
	t.Helper()
	return StartIdentityOn(t, nil, vm)
}

// StartIdentityOn is StartIdentity on listener l (nil: a new loopback
// listener).
func StartIdentityOn(t *testing.T, l net.Listener, vm VM) string {
	t.Helper()
	const header = "egret-test-identity-header"
	mux := http.NewServeMux()
	mux.HandleFunc("/msi/token", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-IDENTITY-HEADER") != header || r.URL.Query().Get("resource") == "" {
			http.Error(w, `{"error":"invalid_request","error_description":"missing X-IDENTITY-HEADER or resource"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"access_token": Token,
			"expires_on":   strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10),
			"resource":     r.URL.Query().Get("resource"),
			"token_type":   "Bearer",
		})
	})
	mux.HandleFunc("/metadata/instance", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata") != "true" || r.URL.Query().Get("api-version") == "" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"error": "Bad request. Required metadata header not specified or api-version missing"})
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		json.NewEncoder(w).Encode(map[string]any{
			"compute": map[string]any{
				"name": vm.Name, "location": "westeurope", "subscriptionId": vm.Subscription,
				"resourceGroupName": vm.ResourceGroup, "resourceId": vm.ID(), "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
			},
			"network": map[string]any{"interface": []any{map[string]any{
				"macAddress": "000D3AF806EC",
				"ipv4": map[string]any{
					"ipAddress": []any{map[string]any{"privateIpAddress": vm.IP, "publicIpAddress": ""}},
					"subnet":    []any{map[string]any{"address": vm.Subnet.Addr().String(), "prefix": strconv.Itoa(vm.Subnet.Bits())}},
				},
				"ipv6": map[string]any{"ipAddress": []any{}},
			}}},
		})
	})
	srv := httptest.NewUnstartedServer(mux)
	if l != nil {
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	t.Cleanup(srv.Close)
	for k, v := range map[string]string{
		"IDENTITY_ENDPOINT":       srv.URL + "/msi/token",
		"IDENTITY_HEADER":         header,
		"AZURE_TOKEN_CREDENTIALS": "prod", // the chain without developer tools
	} {
		t.Setenv(k, v)
	}
	// Unset, not empty: the chain reads an empty AZURE_CLIENT_ID as a
	// user-assigned identity without an ID.
	for _, k := range []string{"IDENTITY_SERVER_THUMBPRINT", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT",
		"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
		"AZURE_USERNAME", "AZURE_FEDERATED_TOKEN_FILE"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	return srv.URL
}
