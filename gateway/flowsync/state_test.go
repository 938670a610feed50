package flowsync

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestStateFileResumesFlows: the flows a gateway writes on its way out are
// held by the next process with their states, bindings and ports (counted
// in its NAT allocator), none longer-lived than before; the file is read
// once. A file too old, or cut short, is refused with an error, never a
// panic (more in TestStateFileRefusals).
func TestStateFileResumesFlows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.state")
	a := newPipeline(t, 1<<12, egress, egress6)
	for i := range 300 {
		st := conntrack.StateEstablished
		if i%3 == 0 {
			st = conntrack.StateCloseWait
		}
		adopt(t, a, flow(i, st))
	}
	n, err := WriteState(path, a, clock())
	if err != nil || n != 300 {
		t.Fatalf("WriteState: %d flows, %v; want 300", n, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := newPipeline(t, 1<<12, egress, egress6)
	got, failed, err := LoadState(path, b, clock())
	if err != nil || got != 300 || failed != 0 {
		t.Fatalf("LoadState: %d adopted, %d failed, %v", got, failed, err)
	}
	if !equal(table(a, egress, egress6), table(b, egress, egress6)) {
		t.Fatal("the next process holds other flows than the last one wrote")
	}
	b.Conntrack().Range(clock(), func(f *conntrack.Flow, rem time.Duration) {
		if rem > time.Hour+50*time.Millisecond { // deadlines round up to a 16.8 ms tick
			t.Fatalf("flow %v resumed with %v to live; it had at most an hour (plus a tick each side)", f.Orig, rem)
		}
	})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("the state file was left to be loaded again")
	}
	if n, _, err := LoadState(path, b, clock()); n != 0 || err != nil {
		t.Fatalf("a missing state file: %d, %v; want nothing and no error", n, err)
	}

	os.WriteFile(path, restamp(t, raw, time.Now().Add(-MaxStateAge-time.Minute)), 0o600)
	if n, _, err := LoadState(path, newPipeline(t, 1<<12, egress), clock()); !isRefusal(err, StateRefusedStale) || n != 0 {
		t.Fatalf("a stale state file was loaded (%d flows, err %v)", n, err)
	}
	for _, cut := range []int{3, 13, 40, len(raw) - 5} {
		os.WriteFile(path, raw[:cut], 0o600)
		if _, _, err := LoadState(path, newPipeline(t, 1<<12, egress), clock()); err == nil {
			t.Fatalf("a state file cut at %d bytes loaded without error", cut)
		}
	}
}

// TestSyncTakesOverResumedFlows: a gateway that resumed flows from its
// state file and then stands by for their egress IP (a rollout restarted
// it and the IP moved to its standby meanwhile) holds the new primary's
// copies: changed state, removal and all, none refused as a port taken.
func TestSyncTakesOverResumedFlows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.state")
	old := newPipeline(t, 1<<12, egress, egress6)
	for i := range 100 {
		adopt(t, old, flow(i, conntrack.StateEstablished))
	}
	if _, err := WriteState(path, old, clock()); err != nil {
		t.Fatal(err)
	}
	b := newPipeline(t, 1<<12) // the restarted gateway: the IPs are not hosted here now
	if n, _, err := LoadState(path, b, clock()); err != nil || n != 100 {
		t.Fatalf("LoadState: %d, %v", n, err)
	}
	sb, addr := standby(t, b)

	// The IPs' new owner: the same flows, 20 since closed and 30 moved on to FIN_WAIT.
	a := newPipeline(t, 1<<12, egress, egress6)
	for i := 20; i < 100; i++ {
		st := conntrack.StateEstablished
		if i < 50 {
			st = conntrack.StateFinWait
		}
		adopt(t, a, flow(i, st))
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(peers(addr))
	sa.Start()
	nstest.Eventually(t, "the resync applied", syncWait, func() bool { st := sb.Stats(); return st.RecordsApplied+st.AdoptFailed >= 80 })
	// The resync's end drops nothing it did not hold for the primary: the
	// 20 closed flows stay until the primary says so or they expire.
	got := table(b, egress, egress6)
	for i := 20; i < 100; i++ {
		f := flow(i, conntrack.StateEstablished)
		if i < 50 {
			f.State = conntrack.StateFinWait
		}
		if g := got[f.Orig]; g != (binding{f.NATAddr, f.NATPort, f.State}) {
			t.Fatalf("flow %d on the standby: %+v, want the primary's %v", i, g, f.State)
		}
	}
	if st := sb.Stats(); st.AdoptFailed != 0 || st.BackupFlows != 80 {
		t.Fatalf("standby stats %+v: want 80 backup flows and no adopt failure", st)
	}

	// A removal reaches the copy too.
	f := flow(60, conntrack.StateEstablished)
	a.Abandon(&f)
	nstest.Eventually(t, "the removal applied", syncWait, func() bool { _, held := table(b, egress, egress6)[f.Orig]; return !held })
}
