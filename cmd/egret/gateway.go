package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
)

func init() {
	register("gateway", "run the data plane on an egress node (XDP + AF_XDP)", runGateway)
}

// listFlag collects a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// gatewayFlags are the command line; set ones override the config file.
type gatewayFlags struct {
	fs          *flag.FlagSet
	config      string
	ifaces      listFlag
	mode        string
	queues      int
	batch       int
	logFormat   string
	metricsAddr string
	watch       time.Duration
}

func parseGatewayFlags(args []string) (*gatewayFlags, error) {
	f := &gatewayFlags{fs: flag.NewFlagSet("egret gateway", flag.ContinueOnError)}
	fs := f.fs
	fs.StringVar(&f.config, "config", "", "YAML config file (docs/gateway.md); SIGHUP or a change of the file reloads it")
	fs.Var(&f.ifaces, "iface", "interface to serve; repeat or comma-separate for several (overrides interfaces)")
	fs.StringVar(&f.mode, "mode", "", "auto | afxdp | afpacket (default auto: AF_XDP, AF_PACKET where XDP cannot attach)")
	fs.IntVar(&f.queues, "queues", 0, "receive queues, one worker each (default: the first interface's RX queue count)")
	fs.IntVar(&f.batch, "batch", 0, "frames per Process/Transmit call, 32–64 (default 64)")
	fs.StringVar(&f.logFormat, "log-format", "", "text | json (default text)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "host:port for metrics (not served yet; observability is a later issue)")
	fs.DurationVar(&f.watch, "watch", time.Second, "how often to check the config file for changes (0 disables; SIGHUP still reloads)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; all settings are flags or in --config", fs.Arg(0))
	}
	return f, nil
}

// load reads the config file (if any), applies the flags that were set and
// validates the result.
func (f *gatewayFlags) load() (*engine.Settled, []byte, error) {
	c := &engine.Config{}
	var raw []byte
	if f.config != "" {
		var err error
		if raw, err = os.ReadFile(f.config); err != nil {
			return nil, nil, fmt.Errorf("read config: %w", err)
		}
		if c, err = engine.ParseConfig(raw); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.config, err)
		}
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "iface":
			c.Interfaces = append([]string(nil), f.ifaces...)
		case "mode":
			c.Mode = f.mode
		case "queues":
			c.Queues = f.queues
		case "batch":
			c.Batch = f.batch
		case "log-format":
			c.LogFormat = f.logFormat
		case "metrics-addr":
			c.MetricsAddr = f.metricsAddr
		}
	})
	s, err := c.Validate()
	if err != nil {
		if f.config != "" {
			return nil, nil, fmt.Errorf("%s: %w", f.config, err)
		}
		return nil, nil, err
	}
	return s, raw, nil
}

func newLogger(format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func runGateway(args []string) error {
	f, err := parseGatewayFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	set, raw, err := f.load()
	if err != nil {
		return err
	}
	log := newLogger(set.LogFormat)
	slog.SetDefault(log)
	if set.MetricsAddr != "" {
		log.Warn("gateway: --metrics-addr is accepted but no metrics endpoint is served yet", "addr", set.MetricsAddr)
	}

	// Signals first: a SIGTERM during start-up must still clean up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	eng, err := engine.New(set, engine.Options{Logger: log})
	if err != nil {
		return err
	}
	eng.Start()
	log.Info("gateway: running", "modes", eng.Modes(), "config", f.config)

	var tick <-chan time.Time
	if f.config != "" && f.watch > 0 {
		t := time.NewTicker(f.watch)
		defer t.Stop()
		tick = t.C
	}
	reload := func(why string) {
		s, _, err := f.load()
		if err != nil {
			log.Error("gateway: reload failed; keeping the running configuration", "why", why, "err", err)
			return
		}
		if err := eng.Reload(s); err != nil {
			log.Error("gateway: reload incomplete", "why", why, "err", err)
		}
	}
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload("SIGHUP")
				continue
			}
			log.Info("gateway: shutting down", "signal", sig.String())
			st := eng.Stats()
			err := eng.Close()
			drops := map[string]uint64{}
			for _, r := range gateway.DropReasons() {
				if n := st.Pipeline.Drop(r); n > 0 {
					drops[r.String()] = n
				}
			}
			log.Info("gateway: final counters", "rx", st.Pipeline.Count(gateway.CounterRx),
				"forwarded", st.Pipeline.Count(gateway.CounterForwarded), "replied", st.Pipeline.Count(gateway.CounterReplied),
				"flows", st.Flows, "drops", drops, "pass_dropped", st.Engine.PassDropped, "no_port", st.Engine.NoPort,
				"no_buffer", st.Engine.NoBuffer, "expired", st.Engine.Expired)
			return err
		case <-tick:
			data, err := os.ReadFile(f.config)
			if err != nil || bytes.Equal(data, raw) {
				continue
			}
			raw = data // a broken file is reported once, not every tick
			reload("config file changed")
		}
	}
}
