package steer

import (
	"context"
	"log/slog"

	"github.com/egret-gw/egret/control/cluster"
)

// RunOnce checks the CNI as Run does, sets up the kernel, starts the source and reconciles once
// (`egret steer --once`); the kernel stays programmed.
func (a *Agent) RunOnce(ctx context.Context) error {
	log := a.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkCilium(ctx, a.ConfigMaps, a.AllowCiliumHostRouting, log); err != nil {
		return err
	}
	if err := a.Kernel.Setup(); err != nil {
		return err
	}
	if err := a.Source.Start(ctx, func(cluster.Kind) {}); err != nil {
		return err
	}
	ch, st, err := a.ReconcileOnce()
	for _, p := range st.Problems {
		log.Warn("input skipped", "problem", p.Error())
	}
	log.Info("reconciled once", "changes", ch.String())
	return err
}

// CleanupIfUninstalled runs when the agent stops: after an uninstall
// (uninstalling, cluster.Uninstalling for the agent's pod, says its
// DaemonSet is gone) it removes the device, rules, routes and filter,
// which a restart keeps; so does an answer it cannot get.
func (k *Kernel) CleanupIfUninstalled(uninstalling func() (bool, error), log *slog.Logger) {
	gone, err := uninstalling()
	if err != nil {
		log.Warn("steer: kernel state kept", "err", err.Error())
		return
	}
	if !gone {
		log.Info("steer: DaemonSet still there, kernel state kept for the next agent")
		return
	}
	if err := k.Cleanup(); err != nil {
		log.Error("steer: uninstall cleanup failed", "err", err.Error())
		return
	}
	log.Info("steer: DaemonSet gone (uninstall): removed the device, rules, routes and filter")
}
