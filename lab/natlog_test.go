package lab

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
)

// natlogBinding is one answer of `egret natlog -o json`.
type natlogBinding struct {
	Namespace   string  `json:"namespace"`
	Pod         string  `json:"pod"`
	PodIP       string  `json:"podIP"`
	PodPort     uint16  `json:"podPort"`
	Destination string  `json:"destination"`
	Protocol    string  `json:"protocol"`
	Gateway     string  `json:"gateway"`
	Start       string  `json:"start"`
	End         *string `json:"end"`
}

// checkNATLog asks `egret natlog --lab` who held the source address the
// echo server saw for the synced connection (sc.seen, a port the gateway
// chose), and wants pod named, through gateway via (any gateway if "").
func checkNATLog(t *testing.T, l *Lab, sc *syncedConn, pod, via string) {
	t.Helper()
	args := []string{"natlog", "--lab", l.Spec.Name, "--ip", sc.seen.Addr().String(), "--port", strconv.Itoa(int(sc.seen.Port())), "--proto", "tcp", "-o", "json"}
	var got []natlogBinding
	// The writer drains its rings every 100 ms: wait for the line.
	nstest.UntilEvery(t, fmt.Sprintf("egret natlog naming %s for %v via %q", pod, sc.seen, via), 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		out, err := run(l.Binary, args...)
		got = nil
		if jerr := json.Unmarshal([]byte(out), &got); jerr != nil {
			return false, fmt.Sprintf("%v %v: %s", err, jerr, out)
		}
		return slices.ContainsFunc(got, func(b natlogBinding) bool {
			return b.Pod == pod && b.Namespace != "" && b.End == nil && b.Protocol == "tcp" && (via == "" || b.Gateway == via)
		}), out
	})
	t.Logf("egret natlog --ip %v --port %d: %+v", sc.seen.Addr(), sc.seen.Port(), got)
}
