package ec2test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/kubetest"
)

// IMDSMAC is the MAC of the primary interface in amazon-ec2-metadata-mock's
// default metadata (its network/interfaces/macs/<mac>/ paths use it).
const IMDSMAC = "0e:49:61:0f:c3:11"

// StartIMDS runs AWS's instance metadata emulator (amazon-ec2-metadata-mock,
// built by hack/ec2-metadata-mock.sh) with IMDSv2 required, as an instance
// in region whose default metadata is overridden by values (keys as in its
// config file: "instance-type", "mac-network-interface-id", ...), and
// returns its endpoint for AWS_EC2_METADATA_SERVICE_ENDPOINT. It stops with
// the test.
func StartIMDS(t *testing.T, region string, values map[string]string) string {
	t.Helper()
	bin := kubetest.Tool(t, "ec2-metadata-mock", "hack/ec2-metadata-mock.sh")
	dir := t.TempDir()
	values["placement-region"] = region
	doc := map[string]any{ // the SDK reads the region from this document
		"accountId": "123456789012", "architecture": "x86_64", "availabilityZone": region + "a",
		"imageId": "ami-0b69ea66ff7391e80", "instanceId": "i-1234567890abcdef0", "instanceType": "m5.large",
		"pendingTime": "2026-01-01T00:00:00Z", "privateIp": "10.0.1.10", "region": region, "version": "2017-09-30",
	}
	cfg, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"values": values},
		"dynamic":  map[string]any{"values": map[string]any{"instance-identity-document": doc}},
	})
	cfgPath := filepath.Join(dir, "aemm-config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--imdsv2", "--hostname", "127.0.0.1", "--port", port, "--config-file", cfgPath)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	log, err := os.Create(filepath.Join(dir, "aemm.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log // it logs every request
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	endpoint := "http://127.0.0.1:" + port
	for {
		req, _ := http.NewRequest(http.MethodPut, endpoint+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return endpoint
			}
		}
		if cmd.ProcessState != nil {
			t.Fatalf("%s exited before it answered", bin)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Env points the AWS SDK's default chain at s and imds (StartIMDS) for the
// rest of the test: credentials from the environment (AccessKey), no shared
// config files, the region from the metadata service.
func (s *Server) Env(t *testing.T, imds string) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":                 AccessKey,
		"AWS_SECRET_ACCESS_KEY":             SecretKey,
		"AWS_SESSION_TOKEN":                 "",
		"AWS_PROFILE":                       "",
		"AWS_REGION":                        "",
		"AWS_DEFAULT_REGION":                "",
		"AWS_CONFIG_FILE":                   filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE":       filepath.Join(dir, "credentials"),
		"AWS_ENDPOINT_URL_EC2":              s.URL,
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds,
		"AWS_EC2_METADATA_DISABLED":         "",
	} {
		t.Setenv(k, v)
	}
}
