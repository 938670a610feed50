package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/gwagent"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/identity"
	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/gateway/flowsync"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/metrics"
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
	log         *logFlags
	metricsAddr string
	probeAddr   string
	watch       time.Duration
	pinDir      string
	natlog      natlogFlags
	busyPoll    busyPollFlags

	// Agent mode (--source or --kubeconfig): the configuration is built
	// from the cluster's objects; docs/gateway-agent.md.
	node             string
	source           string
	kubeconfig       string
	healthAddr       string
	healthMaxConns   int
	healthTLS        health.TLSFiles
	fenceAfter       time.Duration
	controllerLease  string
	announceCount    int
	announceInterval time.Duration
	checkConfig      bool
	publishIfaces    bool
	trustPodIPs      bool
	cloud            cloud.Config
	syncAddr         string
	syncKeyFile      string
	nodeIdentity     string
	stateFile        string
	pod, podNS       string
	flowsSocket      string
	drain            time.Duration
	admission        bool
	metricsAllow     string
	controllerSel    string
	scraperSel       string
	scraperNS        string
	localPort        bool
}

// agent reports whether the command runs as the gateway agent.
func (f *gatewayFlags) agent() bool { return f.source != "" || f.kubeconfig != "" }

// parseGatewayFlags parses and checks the command line.
func parseGatewayFlags(args []string) (*gatewayFlags, error) {
	f := &gatewayFlags{fs: newFlagSet("gateway")}
	f.bindDataPlane()
	f.bindAgent()
	if err := parseFlags(f.fs, args); err != nil {
		return nil, err
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// bindDataPlane binds the flags of both modes: the data plane, its
// outputs and what a stop leaves for the next process.
func (f *gatewayFlags) bindDataPlane() {
	fs := f.fs
	fs.StringVar(&f.config, "config", "", "YAML config file (docs/gateway.md); SIGHUP or a change of the file reloads it")
	fs.Var(&f.ifaces, "iface", "interface to serve; repeat or comma-separate for several (overrides interfaces)")
	fs.StringVar(&f.mode, "mode", "", "auto | afxdp | afpacket (default auto: AF_XDP, AF_PACKET where XDP cannot attach)")
	fs.IntVar(&f.queues, "queues", 0, "receive queues, one worker each (default: the first interface's RX queue count)")
	fs.IntVar(&f.batch, "batch", 0, "frames per Process/Transmit call, 32–64 (default 64)")
	f.log = bindLogFlags(fs)
	fs.StringVar(&f.probeAddr, "probe-addr", "", "host:port serving /healthz and /readyz alone, for the kubelet (deploy/ uses 127.0.0.1:9113, which pods cannot reach); empty: none (they are on --metrics-addr too)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "host:port serving /metrics, /healthz and /readyz (default "+metrics.DefaultGatewayAddr+"; \"off\" disables)")
	fs.DurationVar(&f.watch, "watch", time.Second, "how often to check the config file for changes (0 disables; SIGHUP still reloads)")
	fs.IntVar(&f.announceCount, "announce-count", 3, "gratuitous ARPs / unsolicited NAs sent per claimed egress IP (1–20)")
	fs.DurationVar(&f.announceInterval, "announce-interval", 100*time.Millisecond, "spacing of those announcements (1ms–5s)")
	fs.StringVar(&f.stateFile, "state-file", "", "where the flows are left on SIGTERM for the next process on this node, which resumes them if it starts within "+flowsync.MaxStateAge.String()+" (graceful restart; deploy/ uses /run/egret/flows.state); empty: none")
	fs.StringVar(&f.flowsSocket, "flows-socket", "", "a Unix socket on which \"egret flows\" lists this gateway's flows (deploy/ uses "+DefaultFlowsSocket+"); empty: none")
	fs.StringVar(&f.pinDir, "pin-dir", "", "where the XDP links and counters are pinned, so that the next process takes them over: a bpffs or a directory of one mounted there (default /sys/fs/bpf/egret; deploy/ mounts only the host's /sys/fs/bpf/egret, at /run/egret-bpf)")
	fs.StringVar(&f.natlog.dir, "natlog-dir", "", "NAT log: write every binding made, adopted and ended as JSON lines in this directory (deploy/ uses the hostPath "+DefaultNATLogDir+"; docs/natlog.md); empty: no files")
	fs.IntVar(&f.natlog.maxMB, "natlog-max-size", natlog.DefaultMaxBytes>>20, "NAT log: MiB per file before it is rotated")
	fs.IntVar(&f.natlog.maxFiles, "natlog-max-files", natlog.DefaultMaxFiles, "NAT log: files kept, the current one included; the oldest go first")
	fs.DurationVar(&f.natlog.maxAge, "natlog-max-age", 0, "NAT log: rotated files older than this are removed (checked at each rotation); 0: by count only")
	fs.StringVar(&f.natlog.ipfix, "natlog-ipfix", "", "NAT log: also send every record as an IPFIX NAT event (RFC 8158) over UDP to this host:port")
	f.busyPoll.bind(fs)
	fs.BoolVar(&f.checkConfig, "check-config", false, "parse the flags and the config file, validate them, print the result and exit (0 valid, 1 not); touches neither the NIC nor the API")
}

// bindAgent binds the flags of agent mode (docs/gateway-agent.md).
func (f *gatewayFlags) bindAgent() {
	fs := f.fs
	fs.StringVar(&f.node, "node", os.Getenv("NODE_NAME"), "agent mode: this node's name; status items for it are hosted here (default $NODE_NAME)")
	fs.StringVar(&f.source, "source", "", "agent mode: dir:/path (a directory of YAML objects and the controller's status/), or kube (in-cluster, else $KUBECONFIG)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "agent mode: kubeconfig file of the API server to watch")
	fs.StringVar(&f.healthAddr, "health-addr", defaultHealthAddr(), "agent mode: gRPC health service address (SERVING while the data plane runs and is not fenced); default $HOST_IP:9107, the node's InternalIP in a pod (downward API status.hostIP), else every address; empty disables")
	fs.IntVar(&f.healthMaxConns, "health-max-conns", health.DefaultMaxConns, "agent mode: connections the health service holds at once (1–4096); more are closed at once and counted in egret_listener_refused_connections_total")
	fs.StringVar(&f.healthTLS.Cert, "health-tls-cert", "", "agent mode: mutual TLS for the health service: this gateway's certificate (PEM, with --health-tls-key and --health-tls-client-ca; docs/security.md)")
	fs.StringVar(&f.healthTLS.Key, "health-tls-key", "", "agent mode: mutual TLS: the certificate's private key")
	fs.StringVar(&f.healthTLS.CA, "health-tls-client-ca", "", "agent mode: mutual TLS: the CA the controller's client certificate must chain to")
	fs.DurationVar(&f.fenceAfter, "fence-after", gwagent.DefaultFenceAfter, "agent mode: release every egress IP after this long without contact with the source (and without the controller's lease)")
	fs.StringVar(&f.controllerLease, "controller-lease", gwagent.LeaseMutualTLS.String(), "agent mode: take the lease each reachability probe of the controller carries, which keeps the IPs it names hosted without the source until shortly before the controller may move them: tls (only over mutual TLS, --health-tls-*), any (plain gRPC too: only where nothing but the controller reaches the health port) or off (--fence-after alone)")
	fs.BoolVar(&f.publishIfaces, "publish-interfaces", true, "agent mode with the Kubernetes API: write the served interfaces' subnets on this Node (egret.io/node-primary-ifaddr, egret.io/host-cidrs) unless OVN-Kubernetes publishes its own; needs the right to patch nodes")
	fs.BoolVar(&f.trustPodIPs, "trust-pod-ips", false, "agent mode: accept pod addresses as the API gives them, even outside their Node's spec.podCIDRs (CNIs whose IPAM ignores them); the steer agents' trustPodIPs must agree")
	fs.StringVar(&f.cloud.Provider, "cloud-provider", "", `agent mode with the Kubernetes API and --publish-interfaces: this node is an instance of this cloud ("aws", "gcp", "azure"; on OpenStack the controller does it); also write its cloud.network.openshift.io/egress-ipconfig (interface, subnets, capacity) unless another component owns it (docs/cloud.md)`)
	fs.StringVar(&f.syncAddr, "sync-addr", defaultSyncAddr(), "agent mode: where the flow sync listens for the flows of the egress IPs this node stands by for; default $HOST_IP:9108, the node's InternalIP in a pod, else every address (docs/continuity.md)")
	fs.StringVar(&f.syncKeyFile, "sync-key-file", "", "agent mode: the flow sync's pre-shared key (a Secret's key mounted as a file, at least 32 bytes); without it flows are not synced to standbys")
	fs.StringVar(&f.nodeIdentity, "node-identity", "", `agent mode with the Kubernetes API: "csr": this node's own certificate, issued by the controller through a CertificateSigningRequest (signer `+identity.SignerName+`), authenticates the flow sync and the health service (instead of --health-tls-*): mutual TLS bound to node names (docs/identity.md); the CA is read from the ConfigMap `+identity.CAName+` in --pod-namespace. With a --sync-key-file that exists as well (an upgrade from the shared key), peers and controllers of the previous release are still accepted: the key on the flow sync, plain gRPC on the health port. "": off`)
	fs.StringVar(&f.pod, "pod", os.Getenv("POD_NAME"), "agent mode with the Kubernetes API: this gateway's pod (default $POD_NAME): on SIGTERM, if its DaemonSet is gone (uninstall), the XDP program is detached and no state file written, as without --state-file")
	fs.StringVar(&f.podNS, "pod-namespace", os.Getenv("POD_NAMESPACE"), "the namespace of --pod (default $POD_NAMESPACE)")
	fs.BoolVar(&f.admission, "admission", true, "agent mode with the Kubernetes API: an nftables table (inet "+engine.AdmitTable+") admits the health port only from the controller's pods and nodes, the flow sync only from gateway nodes and the metrics port only from the scraper's pods and nodes and --metrics-allow (docs/security.md#admission-filter)")
	fs.StringVar(&f.metricsAllow, "metrics-allow", "", "agent mode with --admission: comma-separated CIDRs or addresses that may reach --metrics-addr besides the node itself and the scraper's pods (--metrics-scraper-selector); \"any\": no filter on it")
	fs.StringVar(&f.scraperSel, "metrics-scraper-selector", "app.kubernetes.io/name=prometheus", "agent mode with --admission: the label selector of the pods that scrape --metrics-addr (in --metrics-scraper-namespace), whose addresses and nodes' InternalIPs may reach it; \"\": none. With no such pod and no --metrics-allow, only the node itself may")
	fs.StringVar(&f.scraperNS, "metrics-scraper-namespace", "", "agent mode with --admission: the namespace of the --metrics-scraper-selector pods; empty: every namespace (a pod anyone labels so is admitted: name Prometheus' namespace to bind it)")
	fs.StringVar(&f.controllerSel, "controller-selector", "app.kubernetes.io/name=egret-controller", "agent mode with --admission: the label selector of the controller's pods in --pod-namespace, whose addresses and nodes may reach the health port")
	fs.BoolVar(&f.localPort, "local-port", true, "agent mode: serve the selected pods of this node through the veth pair "+config.LocalKernelLink+"/"+config.LocalPortLink+", which the steer agent routes them to (docs/gateway.md#pods-on-gateway-nodes); false: they cannot use this gateway")
	fs.DurationVar(&f.drain, "drain-timeout", 5*time.Second, "agent mode with the flow sync on: on SIGTERM the agent reports NOT_SERVING, so that the controller moves its egress IPs to their standbys (which hold their flows), and forwards until they moved or this long has passed; 0: release them at once (docs/continuity.md)")
}

// check refuses values out of range and combinations that do not go
// together.
func (f *gatewayFlags) check() error {
	if err := f.cloud.Validate(); err != nil {
		return fmt.Errorf("--cloud-provider: %w", err)
	}
	if f.cloud.Provider == cloud.ProviderOpenStack {
		return errors.New("--cloud-provider=openstack: on OpenStack the controller publishes the nodes' egress-ipconfig (it holds the credentials); run the gateway agents without --cloud-provider (docs/cloud.md)")
	}
	if f.cloud.Provider != "" && (!f.agent() || strings.HasPrefix(f.source, "dir:") || !f.publishIfaces) {
		return errors.New("--cloud-provider publishes the node's egress-ipconfig: it needs agent mode with the Kubernetes API and --publish-interfaces")
	}
	if err := f.natlog.check(); err != nil {
		return err
	}
	if err := f.busyPoll.check(f.fs, f.mode); err != nil {
		return err
	}
	if f.announceCount < 1 || f.announceCount > 20 {
		return fmt.Errorf("--announce-count %d: use 1–20", f.announceCount)
	}
	if f.announceInterval < time.Millisecond || f.announceInterval > 5*time.Second {
		return fmt.Errorf("--announce-interval %v: use 1ms–5s", f.announceInterval)
	}
	if f.agent() && f.healthAddr != "" {
		if err := checkListenAddr("--health-addr", f.healthAddr); err != nil {
			return err
		}
	}
	if f.agent() {
		switch {
		case f.node == "":
			return errors.New("--node: agent mode needs this node's name (or NODE_NAME)")
		case f.source != "" && f.source != "kube" && !strings.HasPrefix(f.source, "dir:"):
			return fmt.Errorf("--source %q: use dir:/path or kube", f.source)
		case strings.HasPrefix(f.source, "dir:") && f.kubeconfig != "":
			return errors.New("--kubeconfig and --source dir: exclude each other")
		case f.source == "dir:":
			return errors.New("--source dir: needs a directory (dir:/path)")
		case f.fenceAfter < 100*time.Millisecond || f.fenceAfter > 10*time.Minute:
			return fmt.Errorf("--fence-after %v: use 100ms–10m", f.fenceAfter)
		case f.healthMaxConns < 1 || f.healthMaxConns > 4096:
			return fmt.Errorf("--health-max-conns %d: use 1–4096", f.healthMaxConns)
		case f.drain < 0 || f.drain > time.Minute:
			return fmt.Errorf("--drain-timeout %v: use 0–1m, and keep it below the pod's termination grace period", f.drain)
		}
		if _, err := gwagent.ParseLeaseMode(f.controllerLease); err != nil {
			return fmt.Errorf("--controller-lease: %w", err)
		}
		if err := f.healthTLS.Check(); err != nil {
			return fmt.Errorf("--health-tls-cert, --health-tls-key, --health-tls-client-ca: %w", err)
		}
		if err := f.checkNodeIdentity(); err != nil {
			return err
		}
		if f.syncKeyFile != "" || f.nodeIdentity != "" {
			if err := checkListenAddr("--sync-addr", f.syncAddr); err != nil {
				return err
			}
		}
		if _, err := f.admissionOptions(); err != nil {
			return err
		}
	}
	return nil
}

// checkNodeIdentity refuses --node-identity where it cannot work or
// would be shadowed: it replaces the TLS files, and the certificate comes
// from the Kubernetes API. With --sync-key-file too it is the upgrade's
// transition (syncAuth).
func (f *gatewayFlags) checkNodeIdentity() error {
	switch {
	case f.nodeIdentity == "":
		return nil
	case f.nodeIdentity != "csr":
		return fmt.Errorf("--node-identity %q: use csr, or leave it empty", f.nodeIdentity)
	case strings.HasPrefix(f.source, "dir:"):
		return errors.New("--node-identity=csr: the certificate is issued through the Kubernetes API; a dir: source has none")
	case f.healthTLS.Enabled():
		return errors.New("--node-identity=csr and --health-tls-* exclude each other: the node's certificate authenticates the health service; drop one")
	case f.podNS == "":
		return errors.New("--node-identity=csr: --pod-namespace (or POD_NAMESPACE) names where the CA ConfigMap " + identity.CAName + " is")
	}
	return nil
}

// admissionOptions are the agent's admission settings from the flags, nil
// when there is no filter (--admission=false, or a directory source).
// The ports are filled by admissionPorts once the listeners are known.
func (f *gatewayFlags) admissionOptions() (*gwagent.Admission, error) {
	allow, err := parseMetricsAllow(f.metricsAllow)
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(f.controllerSel)
	if err != nil {
		return nil, fmt.Errorf("--controller-selector %q: %w", f.controllerSel, err)
	}
	var scraper labels.Selector // nil: no scraper (labels.Parse("") would match every pod)
	if strings.TrimSpace(f.scraperSel) != "" {
		if scraper, err = labels.Parse(f.scraperSel); err != nil {
			return nil, fmt.Errorf("--metrics-scraper-selector %q: %w", f.scraperSel, err)
		}
	}
	if f.scraperNS != "" {
		if errs := validation.IsDNS1123Label(f.scraperNS); len(errs) > 0 {
			return nil, fmt.Errorf("--metrics-scraper-namespace %q is not a namespace name: %s", f.scraperNS, strings.Join(errs, "; "))
		}
	}
	if !f.admission || strings.HasPrefix(f.source, "dir:") {
		return nil, nil
	}
	return &gwagent.Admission{MetricsAllow: allow, ControllerNamespace: f.podNS, ControllerSelector: sel,
		ScraperNamespace: f.scraperNS, ScraperSelector: scraper}, nil
}

// parseMetricsAllow parses --metrics-allow: nil for none (""), an empty
// list for "any", else CIDRs (a plain address is one host).
func parseMetricsAllow(v string) ([]netip.Prefix, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return nil, nil
	case "any":
		return []netip.Prefix{}, nil
	}
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("--metrics-allow %q: %q is neither a CIDR nor an address (or use \"any\")", v, s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// admissionPorts fills a's ports from the listeners this gateway runs:
// health (--health-addr), flow sync (only with a key) and metrics; "any"
// in --metrics-allow leaves the metrics port unfiltered.
func (f *gatewayFlags) admissionPorts(a *gwagent.Admission, metricsAddr string, syncOn bool) {
	port := func(addr string) uint16 {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseUint(p, 10, 16)
		return uint16(n)
	}
	if f.healthAddr != "" {
		a.HealthPort = port(f.healthAddr)
	}
	if syncOn {
		a.SyncPort = port(f.syncAddr)
	}
	if metricsAddr == "" {
		metricsAddr = metrics.DefaultGatewayAddr
	}
	if metricsAddr != "off" && (a.MetricsAllow == nil || len(a.MetricsAllow) > 0) {
		a.MetricsPort = port(metricsAddr)
	}
}

// configFile is the config file with the flags applied: the command's own
// keys (logFormat, metricsAddr) in file, and the engine's configuration,
// settled for the static gateway (set) or parsed only for agent mode (base).
type configFile struct {
	file *config.Config
	set  *config.Settled
	base *config.Spec
}

// load reads the config file (if any), applies the flags that were set and
// validates the result.
func (f *gatewayFlags) load() (*configFile, []byte, error) {
	c, raw, err := f.loadRaw()
	if err != nil {
		return nil, nil, err
	}
	s, err := c.Settle()
	if err != nil {
		if f.config != "" {
			return nil, nil, fmt.Errorf("%s: %w", f.config, err)
		}
		return nil, nil, err
	}
	return &configFile{file: c, set: s}, raw, nil
}

// loadBase is load for agent mode: the file holds only the static part
// (nodes, policies and destination tables come from the source); it is parsed here, and
// validated once the agent has added them.
func (f *gatewayFlags) loadBase() (*configFile, []byte, error) {
	c, raw, err := f.loadRaw()
	if err != nil {
		return nil, nil, err
	}
	where := "agent mode"
	if f.config != "" {
		where = f.config
	}
	switch {
	case len(c.Nodes) > 0 || len(c.Policies) > 0 || len(c.DestTables) > 0:
		return nil, nil, fmt.Errorf("%s: nodes, policies and destTables come from the cluster in agent mode; remove them from the file", where)
	case c.EgressIPsClaimed:
		return nil, nil, fmt.Errorf("%s: egressIPsClaimed cannot be used in agent mode: the agent claims, releases and fences the egress IPs itself", where)
	case len(c.Interfaces) == 0:
		return nil, nil, fmt.Errorf("%s: config field interfaces: no interface given; name at least one (or pass --iface)", where)
	}
	if c.Node == "" {
		c.Node = f.node
	}
	base, err := c.Spec()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	base.LocalPort = f.localPort
	return &configFile{file: c, base: base}, raw, nil
}

// loadRaw reads the config file (if any) and applies the flags that were set.
func (f *gatewayFlags) loadRaw() (*config.Config, []byte, error) {
	c := &config.Config{}
	var raw []byte
	if f.config != "" {
		var err error
		if raw, err = os.ReadFile(f.config); err != nil {
			return nil, nil, fmt.Errorf("read config: %w", err)
		}
		if c, err = config.ParseConfig(raw); err != nil {
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
			c.LogFormat = f.log.format
		case "metrics-addr":
			c.MetricsAddr = f.metricsAddr
		}
	})
	if c.MetricsAddr != "" && c.MetricsAddr != "off" {
		if err := checkListenAddr("the metrics address (--metrics-addr, metricsAddr)", c.MetricsAddr); err != nil {
			return nil, nil, err
		}
	}
	return c, raw, nil
}

// runGateway is `egret gateway`.
func runGateway(args []string) error {
	f, err := parseGatewayFlags(args)
	if err != nil {
		return err
	}
	switch {
	case f.checkConfig:
		return f.checkFiles()
	case f.agent():
		return runGatewayAgent(f)
	}
	return runStaticGateway(f)
}

// checkFiles is --check-config: the config file and, in agent mode, the
// health service's TLS files and the sync key load.
func (f *gatewayFlags) checkFiles() error {
	load := f.load
	if f.agent() {
		load = f.loadBase
	}
	if _, _, err := load(); err != nil {
		return err
	}
	if f.agent() && f.healthTLS.Enabled() {
		if _, err := health.ServerTLS(f.healthTLS); err != nil {
			return err
		}
	}
	if f.agent() {
		if _, err := f.loadSyncKey(slog.New(slog.DiscardHandler)); err != nil {
			return err
		}
	}
	fmt.Println("gateway: configuration valid")
	return nil
}

// runStaticGateway is the gateway without agent mode: the config file is
// the whole configuration, reloaded on SIGHUP or when it changes.
func runStaticGateway(f *gatewayFlags) error {
	cf, raw, err := f.load()
	if err != nil {
		return err
	}
	set := cf.set
	log, gm, err := startGatewayOutputs(f, cf)
	if err != nil {
		return err
	}
	defer gm.close()

	// Signals first: a SIGTERM during start-up must still clean up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	eng, err := engine.New(set, f.engineOptions(log))
	if err != nil {
		return err
	}
	gm.resumed(eng.ResumeFlows(f.stateFile))
	eng.Start()
	gm.attach(eng)
	gm.setReady(func() error { return nil })
	log.Info("gateway: running", "modes", eng.Modes(), "config", f.config)

	w := f.watchConfig(raw)
	defer w.Stop()
	reload := reloader(log, f.load, func(c *configFile, why string) {
		if err := eng.Reload(c.set); err != nil {
			log.Error("gateway: reload incomplete", "why", why, "err", err)
		}
	})
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload("SIGHUP")
				continue
			}
			log.Info("gateway: shutting down", "signal", sig.String())
			st := eng.Stats()
			err := engine.Handover{Engine: eng, State: f.stateFile, Log: log}.Close()
			logFinal(log, st)
			return err
		case <-w.C:
			if w.Changed() {
				reload("config file changed")
			}
		}
	}
}

// watchConfig polls --config every --watch (config.Watch).
func (f *gatewayFlags) watchConfig(raw []byte) *config.Watch {
	return config.NewWatch(f.config, raw, f.watch)
}

// reloader returns the static gateway's reload: load reads the
// configuration again, and apply takes it only if it loaded; a file that
// fails to load keeps the running configuration (as gwagent.FollowBase in
// agent mode).
func reloader[T any](log *slog.Logger, load func() (T, []byte, error), apply func(c T, why string)) func(why string) {
	return func(why string) {
		c, _, err := load()
		if err != nil {
			log.Error("gateway: reload failed; keeping the running configuration", "why", why, "err", err)
			return
		}
		apply(c, why)
	}
}

// logFinal logs the engine's counters when the gateway stops.
func logFinal(log *slog.Logger, st engine.Stats) {
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
}

// runGatewayAgent is agent mode: the gateway agent (control/gwagent) builds
// the engine's configuration from the cluster's objects and drives it.
func runGatewayAgent(f *gatewayFlags) error {
	cf, raw, err := f.loadBase()
	if err != nil {
		return err
	}
	log, gm, err := startGatewayOutputs(f, cf)
	if err != nil {
		return err
	}
	defer gm.close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	in, err := f.agentInputs(ctx, cf.base, log)
	if err != nil {
		return err
	}
	auth, err := f.syncAuth(log, in.identity)
	if err != nil {
		return err
	}
	if in.identity != nil {
		go in.identity.Run(ctx)
		registerIdentityMetrics(gm, in.identity.Store())
	}
	adm, err := f.admissionOptions()
	if err != nil {
		return err
	}
	if adm != nil {
		f.admissionPorts(adm, cf.file.MetricsAddr, auth.on())
	}
	dp := &agentDataPlane{f: f, gm: gm, log: log, auth: auth, final: in.final, admission: adm}
	var src cluster.Source
	src, dp.admit = syncAdmission(in.src, f.node)
	dp.denied = &gwagent.DeniedEvents{Node: f.node, Record: src.Event, Log: log}
	leaseMode, _ := gwagent.ParseLeaseMode(f.controllerLease) // checked with the flags
	a := &gwagent.Agent{Drain: f.drainFor(auth.on()), Node: f.node, Base: *cf.base, Source: src, FenceAfter: f.fenceAfter, Log: log,
		ControllerLease: leaseMode,
		Options:         gwagent.Options{TrustPodIPs: f.trustPodIPs, Admission: adm}, StartDataPlane: dp.start,
		ReleaseStale: engine.ReleaseStaleClaims, OnStandbys: dp.setStandbys}
	if f.healthAddr != "" {
		if a.Health, err = f.startHealth(gm, log, in.identity, auth.transition()); err != nil {
			return err
		}
		defer a.Health.Stop()
	}
	w := f.watchConfig(raw)
	defer w.Stop()
	go a.FollowBase(ctx, w, hup, func() (*config.Spec, error) {
		c, _, err := f.loadBase()
		if err != nil {
			return nil, err
		}
		return c.base, nil
	}, in.onBase)
	gm.setReady(func() error {
		if err := certified(in.identity); err != nil {
			return err
		}
		return agentReady(a.State())
	})
	registerFenceMetrics(gm, a)
	if in.facts != nil {
		a.OnNode = in.facts.NodeChanged
		go func() {
			if err := in.facts.Run(ctx); err != nil {
				log.Error("gateway agent: not publishing the node's interface subnets", "err", err)
			}
		}()
	}
	log.Info("gateway agent: starting", "node", f.node, "source", f.source, "kubeconfig", f.kubeconfig,
		"health", f.healthAddr, "fence_after", f.fenceAfter, "controller_lease", leaseMode)
	err = a.Run(ctx)
	if dp.stopDenied != nil {
		dp.stopDenied()
	}
	if dp.eng != nil {
		logFinal(log, dp.eng.Stats())
	}
	return err
}

// certified is nil once this node holds its certificate, or without node
// identity. Until then the gateway is not ready: the controller cannot
// probe it over TLS nor can it sync, and a rollout must not go on to the
// next gateway while the signer issues nothing.
func certified(id *identity.Requester) error {
	if id == nil {
		return nil
	}
	select {
	case <-id.Store().Ready():
		return nil
	default:
		return errors.New("no node certificate yet: its CertificateSigningRequest is not issued (kubectl get csr; the controller's log says why)")
	}
}

// agentReady is the agent's readiness, what the health service reports to
// the controller: ready while the data plane runs and is not fenced.
func agentReady(st gwagent.State) error {
	switch {
	case !st.Running:
		return errors.New("data plane not running yet (waiting for a usable configuration)")
	case st.Fenced:
		return fmt.Errorf("fenced (%s): no contact with the source nor a controller lease, every egress IP released", st.FenceReason)
	}
	return nil
}

// agentInputs is what agent mode reads the cluster with.
type agentInputs struct {
	src    cluster.Source
	facts  *gwagent.Facts     // nil: the node's subnets are not published
	final  func() bool        // whether a stop is an uninstall (engine.Handover); nil: never
	onBase func(*config.Spec) // a reload's interfaces, for the published subnets
	// identity keeps this node's certificate (--node-identity=csr); nil:
	// none. Run is the caller's.
	identity *identity.Requester
}

// agentInputs opens the source the flags name and, with the Kubernetes API,
// the uninstall check of --pod and the node facts of --publish-interfaces.
func (f *gatewayFlags) agentInputs(ctx context.Context, base *config.Spec, log *slog.Logger) (*agentInputs, error) {
	in := &agentInputs{onBase: func(*config.Spec) {}}
	if dir, ok := strings.CutPrefix(f.source, "dir:"); ok {
		// A reader: the status files are the controller's.
		var err error
		in.src, err = cluster.NewDirReader(dir, 0, log)
		return in, err
	}
	restCfg, err := kubeRESTConfig(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	kube, err := gwagent.NewKubeSource(restCfg)
	if err != nil {
		return nil, err
	}
	in.src = kube
	if f.nodeIdentity != "" {
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return nil, err
		}
		if in.identity, err = identity.NewRequester(identity.RequesterConfig{Client: cs, Namespace: f.podNS, Node: f.node, Log: log}); err != nil {
			return nil, err
		}
	}
	if f.pod != "" && f.podNS != "" {
		in.final = func() bool {
			gone, err := cluster.Uninstalling(restCfg, f.podNS, f.pod, "gateway", log)
			if err != nil {
				log.Warn("gateway: XDP program kept for a next pod", "err", err.Error())
			} else if gone {
				log.Info("gateway: DaemonSet gone (uninstall): detaching XDP, leaving no state file")
			}
			return gone
		}
	}
	if f.publishIfaces {
		var ifaces atomic.Pointer[[]string]
		ifaces.Store(&base.Interfaces)
		p, err := cloud.New(ctx, f.cloud)
		if err != nil {
			return nil, err
		}
		in.facts = gwagent.NewFacts(gwagent.Facts{Node: f.node, Source: kube, Annotate: kube.AnnotateNode, Log: log,
			Interfaces: func() []string { return *ifaces.Load() }, Cloud: p})
		in.onBase = func(s *config.Spec) { ifaces.Store(&s.Interfaces) }
	}
	return in, nil
}

// syncAuth is how the flow sync authenticates its peers: a pre-shared key
// (--sync-key-file), this node's certificate (--node-identity=csr), or both
// during an upgrade from the key (certificates first, the key with peers
// that speak only it). With neither the sync is off.
type syncAuth struct {
	key []byte
	tls *flowsync.TLS
}

func (a syncAuth) on() bool { return a.key != nil || a.tls != nil }

// transition reports whether the previous release's authentication is
// still accepted beside the certificates: the key file is there.
func (a syncAuth) transition() bool { return a.key != nil && a.tls != nil }

// syncAuth is the flow sync's authentication from the flags: the key
// file's, and the node's certificate when id is set (peers must present a
// gateway node's certificate, and the node in it is the peer).
func (f *gatewayFlags) syncAuth(log *slog.Logger, id *identity.Requester) (syncAuth, error) {
	key, err := f.loadSyncKey(log)
	if err != nil || id == nil {
		return syncAuth{key: key}, err
	}
	if key != nil {
		log.Warn("gateway agent: node identity with the shared flow sync key too: peers and controllers of the previous release are still accepted; delete the Secret egret-flow-sync once every gateway runs this release (docs/identity.md)")
	}
	st := id.Store()
	gatewayOnly := func(leaf *x509.Certificate) error {
		_, err := identity.GatewayNode(leaf)
		return err
	}
	return syncAuth{key: key, tls: &flowsync.TLS{
		Server:   st.ServerTLS(gatewayOnly),
		Client:   st.ClientTLS(func(leaf *x509.Certificate, _ string) error { return gatewayOnly(leaf) }),
		PeerNode: identity.GatewayNode,
	}}, nil
}

// registerIdentityMetrics registers the expiry of this node's certificate,
// read from st at scrape time: an alert on it catches a signer that stopped
// renewing long before the flow sync and the probe fail.
func registerIdentityMetrics(gm *gatewayMetrics, st *identity.Store) {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "egret_gateway_node_certificate_expiry_timestamp_seconds",
		Help: "When this node's certificate (--node-identity=csr) expires, in Unix seconds; 0 until the controller issued one."},
		func() float64 {
			if t := st.NotAfter(); !t.IsZero() {
				return float64(t.Unix())
			}
			return 0
		})
	if err := gm.reg.Register(g); err != nil {
		gm.log.Warn("gateway agent: node certificate metric not registered", "err", err)
	}
}

// agentDataPlane starts the engine for the agent's first usable
// configuration (gwagent.Agent.StartDataPlane), with the flow sync when
// it is authenticated (syncAuth), and points the sync at the standbys the agent names.
type agentDataPlane struct {
	f     *gatewayFlags
	gm    *gatewayMetrics
	log   *slog.Logger
	auth  syncAuth
	admit func() *flowsync.Admission
	final func() bool
	// admission is the agent's admission filter, nil when off: its drop
	// counters are registered once the engine runs.
	admission *gwagent.Admission
	eng       *engine.Engine // set once running
	sync      *flowsync.Sync // set once running with the sync on
	// denied tells pods about connections the deny-list refused;
	// stopDenied ends it (set once running).
	denied     *gwagent.DeniedEvents
	stopDenied func()
}

func (d *agentDataPlane) start(s *config.Settled) (gwagent.DataPlane, error) {
	f, log := d.f, d.log
	e, err := engine.New(s, f.engineOptions(log))
	if err != nil {
		return nil, err
	}
	d.gm.resumed(e.ResumeFlows(f.stateFile))
	e.Start()
	d.gm.attach(e)
	if d.admission != nil {
		registerAdmissionDrops(d.gm, e, d.admission)
	}
	log.Info("gateway: running", "modes", e.Modes(), "node", f.node, "source", f.source+f.kubeconfig)
	d.eng = e
	d.stopDenied = d.denied.Follow(context.Background(), e.Pipeline())
	if d.auth.on() {
		if d.sync, err = startFlowSync(f, d.auth, d.admit, e, d.gm, log); err != nil {
			e.Close()
			return nil, err
		}
	}
	return engine.Handover{Engine: e, Sync: d.sync, State: f.stateFile, Final: d.final, Log: log}, nil
}

func (d *agentDataPlane) setStandbys(m map[netip.Addr]netip.Addr) {
	if d.sync != nil {
		d.sync.SetPeers(gwagent.SyncPeers(m, d.f.syncAddr, flowsync.DefaultPort))
	}
}

// registerAdmissionDrops registers egret_gateway_admission_drops_total
// for each listener the admission filter guards, read from the engine's
// nftables counters at scrape time.
func registerAdmissionDrops(gm *gatewayMetrics, e *engine.Engine, a *gwagent.Admission) {
	for _, l := range []struct {
		name string
		port uint16
	}{{gwagent.AdmitHealth, a.HealthPort}, {gwagent.AdmitSync, a.SyncPort}, {gwagent.AdmitMetrics, a.MetricsPort}} {
		if l.port == 0 {
			continue
		}
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egret_gateway_admission_drops_total",
			Help:        "Packets to one of the gateway's own listeners dropped by the admission filter: their source may not reach it (docs/security.md).",
			ConstLabels: prometheus.Labels{"listener": l.name}}, func() float64 {
			n, err := e.AdmissionDrops(l.name)
			if err != nil {
				gm.log.Debug("gateway: admission counter not read", "err", err)
			}
			return float64(n)
		})
		if err := gm.reg.Register(c); err != nil {
			gm.log.Warn("gateway: admission metric not registered", "listener", l.name, "err", err)
		}
	}
}

// registerFenceMetrics registers the agent's fence and lease metrics, read
// from its State at scrape time (docs/metrics.md).
func registerFenceMetrics(gm *gatewayMetrics, a *gwagent.Agent) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "egret_gateway_fenced",
			Help: "1 while the agent is fenced: no contact with the source nor a controller lease, every egress IP released."},
			func() float64 { return b2f(a.State().Fenced) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "egret_gateway_leased",
			Help: "1 while the source is out of contact and only the controller's lease keeps the egress IPs it names hosted."},
			func() float64 { return b2f(a.State().Leased) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "egret_gateway_controller_lease_remaining_seconds",
			Help: "How long the controller's last lease still runs (0: none taken, or it ran out)."},
			func() float64 { return a.State().LeaseLeft.Seconds() }),
	}
	for _, reason := range []string{gwagent.FenceSourceLost, gwagent.FenceLeaseExpired} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egret_gateway_fences_total",
			Help:        "Times the agent fenced (released every egress IP), by why: source_lost (no contact for --fence-after, no lease taken), lease_expired (no contact, and the controller's lease ran out).",
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return float64(a.State().Fences[reason]) }))
	}
	for _, c := range []struct {
		reason string
		get    func(gwagent.State) uint64
	}{{"plaintext", func(s gwagent.State) uint64 { return s.LeasesRefused }}, {"malformed", func(s gwagent.State) uint64 { return s.LeasesMalformed }}} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egret_gateway_controller_leases_refused_total",
			Help:        "Controller leases not taken: plaintext (over plain gRPC with --controller-lease=tls), malformed (did not parse).",
			ConstLabels: prometheus.Labels{"reason": c.reason}}, func() float64 { return float64(c.get(a.State())) }))
	}
	for _, c := range cs {
		if err := gm.reg.Register(c); err != nil {
			gm.log.Warn("gateway agent: fence metric not registered", "err", err)
		}
	}
}

// startHealth starts the health service (listenHealth) with its metric.
func (f *gatewayFlags) startHealth(gm *gatewayMetrics, log *slog.Logger, id *identity.Requester, alsoPlain bool) (*health.Server, error) {
	hs, err := f.listenHealth(id, alsoPlain)
	if err != nil {
		return nil, err
	}
	if err := metrics.RegisterRefused(gm.reg, "health", hs.Refused); err != nil {
		log.Warn("gateway agent: health listener metric not registered", "err", err)
	}
	log.Info("gateway agent: serving health checks", "addr", hs.Addr().String(), "mtls", f.healthTLS.Enabled() || id != nil, "node_identity", id != nil, "also_plain", alsoPlain, "max_conns", f.healthMaxConns)
	return hs, nil
}

// drainFor is Agent.Drain: only with the flow sync on do the standbys hold
// the flows; without it an IP moved at a stop loses them, and staying for
// the next process (--state-file) is the better bet.
func (f *gatewayFlags) drainFor(syncOn bool) time.Duration {
	if !syncOn {
		return 0
	}
	return f.drain
}

// engineOptions are the engine's options from the flags.
func (f *gatewayFlags) engineOptions(log *slog.Logger) engine.Options {
	o := engine.Options{Logger: log, Announcements: f.announceCount, AnnounceInterval: f.announceInterval, PinDir: f.pinDir,
		Clock: f.natlog.clock, NATLog: f.natlog.log, TxSkbBudget: f.busyPoll.txSkbBudget}
	o.BusyPoll, o.BusyPollCPUs, o.BusyPollNap = f.busyPoll.options()
	return o
}

// loadSyncKey reads --sync-key-file: nil (flow sync off) without the flag
// or when the file does not exist (deploy/ mounts the Secret optional, so
// creating it turns the sync on); a key that is there but unusable is an
// error.
func (f *gatewayFlags) loadSyncKey(log *slog.Logger) ([]byte, error) {
	if f.syncKeyFile == "" {
		return nil, nil
	}
	if _, err := os.Stat(f.syncKeyFile); errors.Is(err, os.ErrNotExist) {
		log.Warn("gateway agent: flow sync off: no key file; flows are not synced to standbys", "file", f.syncKeyFile)
		return nil, nil
	}
	return flowsync.LoadKey(f.syncKeyFile)
}

// startFlowSync starts sending the flows of the egress IPs e hosts to their
// standbys and holding those of the IPs this node stands by for.
func startFlowSync(f *gatewayFlags, auth syncAuth, admit func() *flowsync.Admission, e *engine.Engine, gm *gatewayMetrics, log *slog.Logger) (*flowsync.Sync, error) {
	cfg := flowsync.Config{Node: f.node, Key: auth.key, TLS: auth.tls, Pipeline: e.Pipeline(), Clock: e.Now, Admission: admit, Log: log}
	if host, _, err := net.SplitHostPort(f.syncAddr); err == nil {
		cfg.Source, _ = netip.ParseAddr(host) // the node's address when --sync-addr names one
	}
	s, err := flowsync.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(f.syncAddr); err != nil {
		return nil, err
	}
	s.Start()
	if err := metrics.RegisterSync(gm.reg, s.Stats); err != nil {
		log.Warn("gateway agent: flow sync metrics not registered", "err", err)
	}
	log.Info("gateway agent: flow sync running", "addr", s.Addr().String(), "node_identity", auth.tls != nil)
	return s, nil
}

// defaultSyncAddr is defaultHealthAddr's address with the flow sync's port.
func defaultSyncAddr() string {
	port := strconv.Itoa(flowsync.DefaultPort)
	if ip := os.Getenv("HOST_IP"); ip != "" {
		return net.JoinHostPort(ip, port)
	}
	return ":" + port
}

// defaultHealthAddr is the node's InternalIP when the DaemonSet passes it
// (HOST_IP from status.hostIP), which is the address the controller probes:
// the health port then answers on no other network the node is on.
func defaultHealthAddr() string {
	port := strconv.Itoa(health.DefaultPort)
	if ip := os.Getenv("HOST_IP"); ip != "" {
		return net.JoinHostPort(ip, port)
	}
	return ":" + port
}

// listenHealth starts the health service as the flags say, NOT_SERVING
// until the data plane runs. With the node's certificate (id) only the
// controller's certificate may probe it over TLS; until the first
// certificate is issued every handshake fails. alsoPlain (the upgrade's
// transition) answers plain gRPC too, unauthenticated: the previous
// release's controller probes so.
func (f *gatewayFlags) listenHealth(id *identity.Requester, alsoPlain bool) (*health.Server, error) {
	opts := []health.Option{health.NotServing(), health.MaxConns(f.healthMaxConns)}
	switch {
	case id != nil:
		opts = append(opts, health.TLS(id.Store().ServerTLS(identity.Controller)))
		if alsoPlain {
			opts = append(opts, health.AlsoPlain())
		}
	case f.healthTLS.Enabled():
		tc, err := health.ServerTLS(f.healthTLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, health.TLS(tc))
	}
	return health.Listen(f.healthAddr, opts...)
}

// gatewayMetrics is the gateway's metrics endpoint. The data-plane
// collector is registered once the engine runs (in agent mode that waits
// for a usable configuration); until then /metrics has the build and
// process series and /readyz answers 503.
type gatewayMetrics struct {
	reg       *prometheus.Registry
	srv       *metrics.Server // nil when disabled
	log       *slog.Logger
	cur       atomic.Pointer[engine.Engine] // the engine attached last: what --flows-socket lists
	stopFlows func()                        // nil without --flows-socket
	// stateRefused counts the state files refused, by reason; nil without
	// --state-file.
	stateRefused *prometheus.CounterVec
	stopNATLog   func() // nil without the NAT log: flushes and closes it
}

// startGatewayOutputs starts what both gateway modes serve before their
// engine runs: the logger (made the default), the metrics endpoint and,
// with --flows-socket, the listing of the engine attach is given.
func startGatewayOutputs(f *gatewayFlags, cf *configFile) (*slog.Logger, *gatewayMetrics, error) {
	log, err := newLogger(cf.file.LogFormat, f.log.level)
	if err != nil {
		return nil, nil, err
	}
	slog.SetDefault(log)
	gm, err := startGatewayMetrics(cf.file.MetricsAddr, log)
	if err != nil {
		return nil, nil, err
	}
	if err := gm.serveProbes(f.probeAddr); err != nil {
		gm.close()
		return nil, nil, err
	}
	if f.stateFile != "" {
		gm.countStateRefusals()
	}
	if err := f.natlog.start(gm, f.natlogNode()); err != nil {
		gm.close()
		return nil, nil, err
	}
	if f.flowsSocket != "" {
		if gm.stopFlows, err = serveFlows(f.flowsSocket, flowsHandler(engineFlows(&gm.cur)), log); err != nil {
			gm.close()
			return nil, nil, err
		}
	}
	return log, gm, nil
}

func startGatewayMetrics(addr string, log *slog.Logger) (*gatewayMetrics, error) {
	gm := &gatewayMetrics{reg: metrics.NewRegistry(version), log: log}
	if addr == "off" {
		return gm, nil
	}
	if addr == "" {
		addr = metrics.DefaultGatewayAddr
	}
	srv, err := metrics.Serve(addr, gm.reg, func() error { return errors.New("data plane starting") })
	if err != nil {
		return nil, err
	}
	gm.srv = srv
	log.Info("gateway: metrics served", "addr", srv.Addr())
	return gm, nil
}

// serveProbes serves the kubelet's probes on addr too (--probe-addr;
// nothing when "" or the metrics are off).
func (gm *gatewayMetrics) serveProbes(addr string) error {
	if addr == "" || gm.srv == nil {
		return nil
	}
	if err := gm.srv.ServeProbes(addr); err != nil {
		return err
	}
	gm.log.Info("gateway: probes served", "addr", gm.srv.ProbeAddr())
	return nil
}

func (gm *gatewayMetrics) setReady(fn func() error) {
	if gm.srv != nil {
		gm.srv.SetReady(fn)
	}
}

func (gm *gatewayMetrics) close() {
	if gm.stopFlows != nil {
		gm.stopFlows()
	}
	if gm.stopNATLog != nil {
		gm.stopNATLog()
	}
	if gm.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		gm.srv.Close(ctx)
	}
}

// countStateRefusals registers egret_gateway_state_file_refused_total,
// every reason at 0, for resumed to count into.
func (gm *gatewayMetrics) countStateRefusals() {
	gm.stateRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egret_gateway_state_file_refused_total",
		Help: "State files of a previous process refused, by reason: a format version this gateway does not read, malformed (cut short, damaged, not a state file), stale (older than 2 minutes), unreadable; the gateway started without their flows."},
		[]string{"reason"})
	for _, r := range flowsync.StateRefusals {
		gm.stateRefused.WithLabelValues(string(r))
	}
	if err := gm.reg.Register(gm.stateRefused); err != nil {
		gm.log.Warn("gateway: state file metric not registered", "err", err)
	}
}

// resumed counts the state file the engine refused, if it did
// (Engine.ResumeFlows).
func (gm *gatewayMetrics) resumed(err error) {
	var se *flowsync.StateError
	if gm.stateRefused != nil && errors.As(err, &se) {
		gm.stateRefused.WithLabelValues(string(se.Reason)).Inc()
	}
}

// attach registers the data-plane collector over eng and lists its flows.
func (gm *gatewayMetrics) attach(eng *engine.Engine) {
	gm.cur.Store(eng)
	if err := gm.reg.Register(metrics.NewGatewayCollector(engineSource(eng))); err != nil {
		gm.log.Warn("gateway: data-plane metrics not registered", "err", err)
	}
	lost := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "egret_gateway_drop_samples_lost_total",
		Help: "Samples of dropped packets not delivered because their reader (egret flows --drops, the agent's EgressDestinationDenied Events) was behind; the drops themselves are counted in egret_gateway_dropped_packets_total."},
		func() float64 { return float64(eng.Pipeline().DropSamplesLost()) })
	if err := gm.reg.Register(lost); err != nil {
		gm.log.Warn("gateway: drop sample metric not registered", "err", err)
	}
}

// engineSource adapts a running engine to the collector. The collector
// serialises scrapes, so the closures share their scratch space.
func engineSource(eng *engine.Engine) metrics.GatewaySource {
	var ws []engine.WorkerStats
	return metrics.GatewaySource{
		Workers: func(dst []metrics.WorkerStats) []metrics.WorkerStats {
			ws = eng.Workers(ws[:0])
			for i := range ws {
				w := &ws[i]
				dst = append(dst, metrics.WorkerStats{Pipeline: w.Pipeline, BusyNanos: w.Engine.BusyNanos,
					NoBuffer: w.Engine.NoBuffer, NoPort: w.Engine.NoPort, PassDropped: w.Engine.PassDropped})
			}
			return dst
		},
		Interfaces: func(dst []metrics.InterfaceStats) []metrics.InterfaceStats {
			eng.EachPort(func(iface string, p nic.Queue) {
				st := p.Stats()
				is := metrics.InterfaceStats{Name: iface, RxPackets: st.RxFrames, TxPackets: st.TxFrames,
					RxBytes: st.RxBytes, TxBytes: st.TxBytes, HasBytes: true,
					TxDrops: st.TxDrops, RxErrors: st.RxErrors, TxErrors: st.TxErrors}
				if x, ok := p.(*nic.XSK); ok {
					// The socket stays open during EachPort.
					if xs, err := metrics.ReadXDPRingStats(x.FD()); err == nil {
						is.XDP, is.HasXDP = xs, true
					}
				}
				dst = append(dst, is)
			})
			return dst
		},
		Conntrack:   eng.Pipeline().Conntrack(),
		NAT:         eng.Pipeline().NAT(),
		EgressIPs:   eng.Hosted,
		TunnelPeers: eng.TunnelPeers,
		Claims:      eng.ClaimStats,
	}
}

// natlogFlags are the NAT log's flags and, once started, the log.
type natlogFlags struct {
	dir      string
	maxMB    int
	maxFiles int
	maxAge   time.Duration
	ipfix    string

	log   *natlog.Log  // nil: off
	clock func() int64 // the engine's clock, which the records are on (nil: off)
}

func (n *natlogFlags) check() error {
	if n.maxMB < 1 {
		return fmt.Errorf("--natlog-max-size %d: use at least 1 (MiB)", n.maxMB)
	}
	if n.maxFiles < 1 {
		return fmt.Errorf("--natlog-max-files %d: use at least 1", n.maxFiles)
	}
	if n.maxAge < 0 {
		return fmt.Errorf("--natlog-max-age %v: use 0 or more", n.maxAge)
	}
	if n.ipfix != "" {
		if _, _, err := net.SplitHostPort(n.ipfix); err != nil {
			return fmt.Errorf("--natlog-ipfix %q: want host:port: %w", n.ipfix, err)
		}
	}
	return nil
}

// natlogNode is the gateway name the NAT log writes: --node, else the host
// name.
func (f *gatewayFlags) natlogNode() string {
	if f.node != "" {
		return f.node
	}
	h, _ := os.Hostname()
	return h
}

// start opens the NAT log when --natlog-dir or --natlog-ipfix asks for
// one, runs its writer until gm closes, and registers its counters.
func (n *natlogFlags) start(gm *gatewayMetrics, node string) error {
	if n.dir == "" && n.ipfix == "" {
		return nil
	}
	epoch := time.Now()
	n.clock = func() int64 { return int64(time.Since(epoch)) }
	l, err := natlog.New(natlog.Config{Dir: n.dir, MaxBytes: int64(n.maxMB) << 20, MaxFiles: n.maxFiles, MaxAge: n.maxAge,
		IPFIX: n.ipfix, Gateway: node, Clock: n.clock, Logger: gm.log})
	if err != nil {
		return err
	}
	n.log = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	gm.stopNATLog = func() {
		cancel()
		<-done
	}
	for _, c := range []struct {
		name, help string
		get        func(natlog.Stats) uint64
	}{
		{"egret_natlog_records_written_total", "NAT log records written (to the files, else to the IPFIX collector).", func(s natlog.Stats) uint64 { return s.Written }},
		{"egret_natlog_records_dropped_total", "NAT log records lost because a worker's ring was full (the writer fell behind); the packets went through.", func(s natlog.Stats) uint64 { return s.Dropped }},
		{"egret_natlog_records_failed_total", "NAT log records lost to a write error (disk full, unwritable directory).", func(s natlog.Stats) uint64 { return s.Failed }},
	} {
		get := c.get
		if err := gm.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(get(l.Stats())) })); err != nil {
			gm.log.Warn("gateway: NAT log metrics not registered", "err", err)
		}
	}
	gm.log.Info("gateway: NAT log on", "dir", n.dir, "ipfix", n.ipfix, "gateway", node)
	return nil
}
