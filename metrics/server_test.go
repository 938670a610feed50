package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServer(t *testing.T) {
	reg := NewRegistry("v1.2.3")
	notReady := errors.New("no configuration snapshot yet")
	srv, err := Serve("127.0.0.1:0", reg, func() error { return notReady })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	base := "http://" + srv.Addr()

	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	want := `egret_build_info{goversion="` + runtime.Version() + `",revision="`
	if !strings.Contains(body, want) || !strings.Contains(body, `version="v1.2.3"} 1`) {
		t.Fatalf("/metrics lacks build info %q:\n%s", want, body)
	}
	if !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_start_time_seconds") {
		t.Fatal("/metrics lacks the Go and process collectors")
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	code, body = get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, notReady.Error()) {
		t.Fatalf("/readyz while not ready: %d %q", code, body)
	}
	srv.SetReady(nil)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz when ready: %d", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestServeErrors(t *testing.T) {
	if _, err := Serve("127.0.0.1:0", nil, nil); err == nil {
		t.Fatal("Serve accepted a nil registry")
	}
	if _, err := Serve("not an address", prometheus.NewRegistry(), nil); err == nil || !strings.Contains(err.Error(), "not an address") {
		t.Fatalf("bad address: %v", err)
	}
	a, err := Serve("127.0.0.1:0", prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if _, err := Serve(a.Addr(), prometheus.NewRegistry(), nil); err == nil {
		t.Fatal("second server on a busy port did not fail")
	}
}
