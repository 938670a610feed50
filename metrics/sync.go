package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egret-gw/egret/gateway/flowsync"
)

// syncSeries are the flow sync's series (docs/metrics.md, "Flow sync").
var syncSeries = []struct {
	name, help string
	gauge      bool
	get        func(*flowsync.Stats) uint64
}{
	{"egret_gateway_sync_records_sent_total", "Flow records sent to standbys: new, changed, refreshed or removed flows.", false, func(s *flowsync.Stats) uint64 { return s.RecordsSent }},
	{"egret_gateway_sync_sent_bytes_total", "Bytes of flow sync batches sent to standbys (before encryption).", false, func(s *flowsync.Stats) uint64 { return s.BytesSent }},
	{"egret_gateway_sync_batches_sent_total", "Flow sync batches (sealed messages) sent to standbys.", false, func(s *flowsync.Stats) uint64 { return s.BatchesSent }},
	{"egret_gateway_sync_full_resyncs_total", "Full resyncs started: every new session with a standby starts one (after start-up, a lost session or a stall).", false, func(s *flowsync.Stats) uint64 { return s.FullResyncs }},
	{"egret_gateway_sync_stalls_total", "Sessions dropped because the standby acknowledged nothing for the stall timeout while data waited.", false, func(s *flowsync.Stats) uint64 { return s.Stalls }},
	{"egret_gateway_sync_slots_looked_total", "Flow table slots the sync's scans looked at for a standby (changed ones, the sweep's share, and every slot for a resync): what finding the changes costs.", false, func(s *flowsync.Stats) uint64 { return s.SlotsLooked }},
	{"egret_gateway_sync_connect_failures_total", "Attempts to open a session with a standby that failed (unreachable, it did not prove the key, or it speaks another protocol version).", false, func(s *flowsync.Stats) uint64 { return s.ConnectFail }},
	{"egret_gateway_sync_records_applied_total", "Flow records from primaries applied here (backup flows adopted, updated or removed).", false, func(s *flowsync.Stats) uint64 { return s.RecordsApplied }},
	{"egret_gateway_sync_records_owned_total", "Flow records ignored because their egress IP is hosted here (the flow is live and this gateway's own).", false, func(s *flowsync.Stats) uint64 { return s.RecordsOwned }},
	{"egret_gateway_sync_adopt_failures_total", "Flows from primaries that could not be held (flow table full, port taken, return path unknown).", false, func(s *flowsync.Stats) uint64 { return s.AdoptFailed }},
	{"egret_gateway_sync_refused_total", "Sync connections or messages refused because they did not prove the pre-shared key, or the listener was full.", false, func(s *flowsync.Stats) uint64 { return s.Refused }},
	{"egret_gateway_sync_version_refused_total", "Sync handshakes refused because the peer speaks a flow sync protocol version this gateway does not (it speaks its own release's and the previous minor release's); counted on both sides.", false, func(s *flowsync.Stats) uint64 { return s.VersionRefused }},
	{"egret_gateway_sync_key_sessions_total", "Sync sessions authenticated by the shared key rather than node certificates, counted on both sides; once it stays flat after every gateway runs this release, delete the Secret egret-flow-sync and restart the gateways.", false, func(s *flowsync.Stats) uint64 { return s.KeySessions }},
	{"egret_gateway_sync_malformed_total", "Authenticated sync messages that did not parse; the session was dropped.", false, func(s *flowsync.Stats) uint64 { return s.Malformed }},
	{"egret_gateway_sync_late_resyncs_total", "Sessions a standby ended so that the primary resends everything: its view of the cluster came to back records it had refused (the primary saw the new status first).", false, func(s *flowsync.Stats) uint64 { return s.LateResyncs }},
	{"egret_gateway_sync_backup_flows", "Backup flows held here for primaries.", true, func(s *flowsync.Stats) uint64 { return s.BackupFlows }},
}

// RegisterSync registers the egret_gateway_sync_* series; stats reports
// the flow sync's counters.
func RegisterSync(reg prometheus.Registerer, stats func() flowsync.Stats) error {
	for _, se := range syncSeries {
		get := se.get
		f := func() float64 { s := stats(); return float64(get(&s)) }
		var c prometheus.Collector
		if se.gauge {
			c = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: se.name, Help: se.help}, f)
		} else {
			c = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: se.name, Help: se.help}, f)
		}
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for r := range flowsync.NumRefusals {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egret_gateway_sync_refusals_total",
			Help:        "Flow records (and, for reasons peer_address and peer_identity, sessions) of key or certificate holders that the cluster does not back, refused: the egress IP is not stood by here, its host is another node, the VTEP or pod source is no known node's, the peer holds its maximum of flows, the peer connects from another address than its node's (peer_address), or its certificate is not that of the gateway node it names (peer_identity).",
			ConstLabels: prometheus.Labels{"reason": r.String()}},
			func() float64 { return float64(stats().RecordsRefused[r]) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
