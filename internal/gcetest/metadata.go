package gcetest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Identity is what the metadata server says of the instance it runs on.
type Identity struct {
	Project, Zone, Name string
	IP, SubnetMask      string // of network-interfaces/0
}

// StartMetadata runs a GCE metadata server (the paths the SDK and Egret
// read, Metadata-Flavor: Google required both ways) for the instance id,
// whose service account token is Token, and points the SDK's default
// chain at it for the rest of the test: GCE_METADATA_HOST names it, and
// no credentials file or gcloud configuration is found, so Application
// Default Credentials come from the metadata server as on a real instance.
func StartMetadata(t *testing.T, id Identity) {
	t.Helper()
	StartMetadataOn(t, nil, id)
}

// StartMetadataOn is StartMetadata on listener l (nil: a new loopback
// listener).
func StartMetadataOn(t *testing.T, l net.Listener, id Identity) {
	t.Helper()
	values := map[string]string{
		"project/project-id":                       id.Project,
		"project/numeric-project-id":               "123456789012",
		"instance/zone":                            "projects/123456789012/zones/" + id.Zone,
		"instance/name":                            id.Name,
		"instance/id":                              "4567890123456789",
		"instance/network-interfaces/0/ip":         id.IP,
		"instance/network-interfaces/0/subnetmask": id.SubnetMask,
		"instance/service-accounts/default/email":  "egret@" + id.Project + ".iam.gserviceaccount.com",
		"instance/service-accounts/default/scopes": "https://www.googleapis.com/auth/cloud-platform",
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "Google")
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "Missing required header: Metadata-Flavor", http.StatusForbidden)
			return
		}
		path := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/"), "/")
		if path == "instance/service-accounts/default/token" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"access_token": Token, "expires_in": 3599, "token_type": "Bearer"})
			return
		}
		v, ok := values[path]
		if !ok || v == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/text")
		w.Write([]byte(v))
	}))
	if l != nil {
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"GCE_METADATA_HOST":                 strings.TrimPrefix(srv.URL, "http://"),
		"GOOGLE_APPLICATION_CREDENTIALS":    "",
		"CLOUDSDK_CONFIG":                   dir,
		"GOOGLE_API_USE_CLIENT_CERTIFICATE": "false",
		"GOOGLE_API_USE_MTLS_ENDPOINT":      "never",
	} {
		t.Setenv(k, v)
	}
}
