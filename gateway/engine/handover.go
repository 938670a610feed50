package engine

import (
	"log/slog"

	"github.com/egret-gw/egret/gateway/flowsync"
)

// Handover is the engine with what hands its flows over when it stops:
// the flow sync (nil without a key), closed first since it reads the flow
// table, and the state file (none if ""), written once the workers have
// stopped so that it holds every flow as it ended. With a state file a
// stop is a restart: the XDP programs stay attached, held for as long as
// the next process may still resume the flows (CloseHeld), unless Final
// (nil: never) says at the stop that it is an uninstall; then, as without
// a state file, they are detached.
type Handover struct {
	*Engine
	// Sync is the running flow sync, nil when it is off.
	Sync *flowsync.Sync
	// State is the state file's path, "" for none.
	State string
	// Final, if set, reports at the stop whether it is an uninstall.
	Final func() bool
	// Log receives what happened to the flows.
	Log *slog.Logger
}

// Close stops the flow sync and the engine, leaving the flows in the state
// file for the next process unless the stop is final.
func (h Handover) Close() error {
	if h.Sync != nil {
		h.Sync.Close()
	}
	if h.State == "" || (h.Final != nil && h.Final()) {
		return h.Engine.Close()
	}
	err := h.Engine.CloseHeld(flowsync.MaxStateAge)
	if n, werr := flowsync.WriteState(h.State, h.Pipeline(), h.Now()); werr != nil {
		h.Log.Error("gateway: flows not left for the next process", "err", werr)
	} else {
		h.Log.Info("gateway: flows left for the next process", "flows", n, "file", h.State)
	}
	return err
}

// ResumeFlows adopts the flows a previous process on this node left in the
// state file at path ("" for none), before the workers start: no packet of
// theirs meets an empty table. A file it refuses (*flowsync.StateError:
// another format version, damaged, too old) is logged and returned, and
// the engine starts without its flows.
func (e *Engine) ResumeFlows(path string) error {
	if path == "" {
		return nil
	}
	n, failed, err := flowsync.LoadState(path, e.Pipeline(), e.Now())
	if err != nil {
		e.log.Warn("gateway: flows of the previous process not resumed; starting without them", "err", err)
		return err
	}
	if n+failed > 0 {
		e.log.Info("gateway: resumed the flows of the previous process", "flows", n, "not_resumed", failed, "file", path)
	}
	return nil
}
