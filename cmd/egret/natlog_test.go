package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/natlog"
	corev1 "k8s.io/api/core/v1"
)

const natlogLines = `{"event":"create","time":"2026-12-04T14:02:00Z","protocol":"tcp","namespace":"shop","pod":"web-1","podUID":"u1","podIP":"10.244.1.5","podPort":40000,"egressIP":"192.0.2.101","egressPort":40123,"dstIP":"198.51.100.7","dstPort":443,"gateway":"gw-a"}
{"event":"adopt","time":"2026-12-04T14:02:01Z","protocol":"tcp","namespace":"shop","pod":"web-1","podUID":"u1","podIP":"10.244.1.5","podPort":40000,"egressIP":"192.0.2.101","egressPort":40123,"dstIP":"198.51.100.7","dstPort":443,"gateway":"gw-b"}
{"event":"end","time":"2026-12-04T14:05:00Z","protocol":"tcp","podIP":"10.244.1.5","podPort":40000,"egressIP":"192.0.2.101","egressPort":40123,"dstIP":"198.51.100.7","dstPort":443,"gateway":"gw-b"}
`

func TestNATLogQueryDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "gw-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gw-a", "natlog.jsonl"), []byte(natlogLines), 0o644); err != nil {
		t.Fatal(err)
	}
	at, err := parseAt("2026-12-04 14:02:07", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := queryDir(dir, natlog.Question{IP: netip.MustParseAddr("192.0.2.101"), Port: 40123, Protocol: "tcp", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Gateway != "gw-a" || got[0].End != nil || got[1].Gateway != "gw-b" || got[1].End == nil {
		t.Fatalf("%v", got)
	}
	var b bytes.Buffer
	if err := writeBindings(&b, got, "json"); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range out[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"destination", "end", "gateway", "namespace", "pod", "podIP", "podPort", "protocol", "start"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if out[0]["pod"] != "web-1" || out[0]["namespace"] != "shop" || out[0]["destination"] != "198.51.100.7:443" || out[0]["end"] != nil {
		t.Fatalf("%v", out[0])
	}
	b.Reset()
	if err := writeBindings(&b, got, "table"); err != nil || !strings.Contains(b.String(), "shop       web-1") {
		t.Fatalf("%v\n%s", err, b.String())
	}
	// After the end on gw-b, only gw-a's record (never ended: killed) holds.
	late, _ := parseAt("2026-12-04T14:06:00Z", time.Now())
	if got, _ := queryDir(dir, natlog.Question{IP: netip.MustParseAddr("192.0.2.101"), Port: 40123, At: late}); len(got) != 1 || got[0].Gateway != "gw-a" {
		t.Fatalf("%v", got)
	}
	if _, err := parseAt("yesterday", time.Now()); err == nil {
		t.Fatal("--at yesterday accepted")
	}
}

func TestPodNATLogDir(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Args: []string{"gateway", "--natlog-dir=/var/log/egret/natlog"}}}}}
	if d, ok := podNATLogDir(p); !ok || d != DefaultNATLogDir {
		t.Fatal(d, ok)
	}
	p.Spec.Containers[0].Args = []string{"gateway"}
	if _, ok := podNATLogDir(p); ok {
		t.Fatal("found a --natlog-dir in none")
	}
}
