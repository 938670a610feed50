package gwagent

import (
	"maps"
	"net/netip"
	"testing"
)

// TestSyncPeers: each standby is reached at the port of this node's own
// sync address, or the default port where that names none or port 0.
func TestSyncPeers(t *testing.T) {
	sb := map[netip.Addr]netip.Addr{addr("192.0.2.10"): addr("10.0.0.22"), addr("2001:db8::10"): addr("fd00::22")}
	for syncAddr, want := range map[string]map[netip.Addr]string{
		"10.0.0.21:7000": {addr("192.0.2.10"): "10.0.0.22:7000", addr("2001:db8::10"): "[fd00::22]:7000"},
		":7001":          {addr("192.0.2.10"): "10.0.0.22:7001", addr("2001:db8::10"): "[fd00::22]:7001"},
		"127.0.0.1:0":    {addr("192.0.2.10"): "10.0.0.22:9108", addr("2001:db8::10"): "[fd00::22]:9108"},
		"no port":        {addr("192.0.2.10"): "10.0.0.22:9108", addr("2001:db8::10"): "[fd00::22]:9108"},
	} {
		if got := SyncPeers(sb, syncAddr, 9108); !maps.Equal(got, want) {
			t.Errorf("SyncPeers(%q) = %v, want %v", syncAddr, got, want)
		}
	}
	if got := SyncPeers(nil, ":7000", 9108); len(got) != 0 {
		t.Errorf("no standbys: %v", got)
	}
}
