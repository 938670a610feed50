package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"time"

	"github.com/egret-gw/egret/control/status"
	"github.com/egret-gw/egret/gateway/flowsync"
)

// standbyLag is how far a standby's copy of a flow may trail its owner's:
// one scan of the flow sync, and 100 ms to send and apply it
// (docs/continuity.md).
const standbyLag = 100*time.Millisecond + flowsync.DefaultInterval

// flowID names a flow across gateways: its protocol, pod and server side.
type flowID struct {
	proto       string
	pod, server netip.AddrPort
}

// compareStandby judges whether standby holds the flows of egress IP ip
// that node hosts, from the two gateways' flows sockets: every flow the
// owner listed before and after a pause of standbyLag (and not about to
// expire) must be on the standby as a backup flow with the same egress
// port. Flows younger than that may still be on their way.
func compareStandby(ownerSocket, standbySocket string, ip netip.Addr, node, standby string) (state, detail string) {
	early, err := flowSet(ownerSocket, ip, false)
	if err != nil {
		return status.SyncUnknown, fmt.Sprintf("reading %s's flows: %v", node, err)
	}
	// Production code, not a test: the allowed lag is a length of time.
	time.Sleep(standbyLag)
	held, err := flowSet(standbySocket, ip, true)
	if err != nil {
		return status.SyncUnknown, fmt.Sprintf("reading %s's flows: %v", standby, err)
	}
	late, err := flowSet(ownerSocket, ip, false)
	if err != nil {
		return status.SyncUnknown, fmt.Sprintf("reading %s's flows: %v", node, err)
	}
	stable, missing, example := 0, 0, ""
	for k, a := range early {
		b, ok := late[k]
		if !ok || a.ExpiresIn < 1 || b.ExpiresIn < 1 {
			continue
		}
		stable++
		if h, ok := held[k]; !ok || h.EgressPort != b.EgressPort {
			missing++
			if example == "" {
				example = fmt.Sprintf("%s %v→%v as port %d", k.proto, k.pod, k.server, b.EgressPort)
			}
		}
	}
	if missing > 0 {
		return status.SyncBehind, fmt.Sprintf("%s lacks %d of the %d flows %s has had for over %v (first: %s)", standby, missing, stable, node, standbyLag, example)
	}
	return status.SyncInStep, fmt.Sprintf("%s holds all %d flows %s has had for over %v", standby, stable, node, standbyLag)
}

// flowSet lists the flows of egress IP ip on the gateway behind socket:
// its backup flows (backup) or its own.
func flowSet(socket string, ip netip.Addr, backup bool) (map[flowID]flowEntry, error) {
	resp, err := getFlows(socket, "?egressIP="+url.QueryEscape(ip.String()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[flowID]flowEntry{}
	dec := json.NewDecoder(resp.Body)
	for {
		var e flowEntry
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("the gateway on %s sent a flow that does not parse: %w", socket, err)
		}
		if e.Backup == backup {
			out[flowID{e.Proto, e.Pod, e.Server}] = e
		}
	}
}
