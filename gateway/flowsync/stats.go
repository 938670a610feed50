package flowsync

import "sync/atomic"

// Stats are the flow sync's counters since start (metrics:
// egret_gateway_sync_*, docs/metrics.md).
type Stats struct {
	// Both sides: handshakes refused because the peer speaks a protocol
	// version this gateway does not (SyncVersion and the previous minor
	// release's only).
	VersionRefused uint64
	// Both sides: sessions authenticated by the shared key rather than
	// node certificates (in the key mode, every session; in the
	// transition, those with gateways of the previous release).
	KeySessions uint64
	// Sending side.
	RecordsSent uint64 // flows sent: new, changed, refreshed or gone
	BatchesSent uint64 // sealed messages of them
	BytesSent   uint64 // their plaintext bytes
	FullResyncs uint64 // full resyncs started (each new session starts one)
	Stalls      uint64 // sessions dropped because the peer stopped acknowledging (slow or gone)
	ConnectFail uint64 // attempts to reach a standby that failed (unreachable or refused)
	SlotsLooked uint64 // flow table slots the scans looked at for a standby: what finding the changes costs
	// Receiving side.
	RecordsApplied uint64 // flows adopted, updated or removed as the primary said
	RecordsOwned   uint64 // records ignored: their egress IP is hosted here, so the flow is live and ours
	AdoptFailed    uint64 // flows that could not be held (table full, port taken, return path unknown)
	Refused        uint64 // connections or messages without the key (TLS mode: a failed TLS handshake), or over the listener's caps, dropped
	Malformed      uint64 // authenticated messages that did not parse (session dropped)
	BackupFlows    uint64 // flows held for peers now (gauge)
	LateResyncs    uint64 // sessions ended so that the peer resends everything: the view here came to back records it had refused
	// RecordsRefused counts, by reason, the records (and, for
	// RefusedPeerAddress and RefusedPeerIdentity, the sessions) of key
	// or certificate holders that the cluster does not back (Admission).
	RecordsRefused [NumRefusals]uint64
}

type counters struct {
	recordsSent, batchesSent, bytesSent, fullResyncs, stalls, connectFail, slotsLooked atomic.Uint64
	recordsApplied, recordsOwned, adoptFailed, refused, malformed, lateResyncs         atomic.Uint64
	versionRefused, keySessions                                                        atomic.Uint64
	backup                                                                             atomic.Int64
	refusals                                                                           [NumRefusals]atomic.Uint64
}

func (c *counters) snapshot() Stats {
	st := Stats{RecordsSent: c.recordsSent.Load(), BatchesSent: c.batchesSent.Load(), BytesSent: c.bytesSent.Load(),
		FullResyncs: c.fullResyncs.Load(), Stalls: c.stalls.Load(), ConnectFail: c.connectFail.Load(), SlotsLooked: c.slotsLooked.Load(),
		RecordsApplied: c.recordsApplied.Load(), RecordsOwned: c.recordsOwned.Load(), AdoptFailed: c.adoptFailed.Load(),
		Refused: c.refused.Load(), Malformed: c.malformed.Load(), BackupFlows: uint64(max(c.backup.Load(), 0)),
		LateResyncs: c.lateResyncs.Load(), VersionRefused: c.versionRefused.Load(),
		KeySessions: c.keySessions.Load()}
	for i := range st.RecordsRefused {
		st.RecordsRefused[i] = c.refusals[i].Load()
	}
	return st
}
