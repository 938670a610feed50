package gwagent

import (
	"context"
	"log/slog"
	"os"

	"github.com/egret-gw/egret/gateway/config"
)

// FollowBase reloads the static part of the configuration until ctx ends:
// on every value from hup (SIGHUP) and on every tick of w that finds the
// file changed. load reads it again; a file that fails to load keeps the
// running configuration, else apply (nil: none) sees it first and SetBase
// takes it.
func (a *Agent) FollowBase(ctx context.Context, w *config.Watch, hup <-chan os.Signal, load func() (*config.Spec, error), apply func(*config.Spec)) {
	log := a.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reload := func(why string) {
		c, err := load()
		if err != nil {
			log.Error("gateway: reload failed; keeping the running configuration", "why", why, "err", err)
			return
		}
		if apply != nil {
			apply(c)
		}
		a.SetBase(*c)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case <-w.C:
			if w.Changed() {
				reload("config file changed")
			}
		}
	}
}
