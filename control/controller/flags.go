package controller

import (
	"flag"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egret-gw/egret/control/dnsres"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/identity"
)

// Flags are the command-line options of `egret controller`; values given on
// the command line override the configuration file.
type Flags struct {
	ConfigFile string
	Kubeconfig string
	// Source is "kube" (the API server, cluster.Kube) or "dir:/path" (cluster.Dir).
	Source       string
	Identity     string
	PollInterval time.Duration

	fs            *flag.FlagSet
	reach         int
	healthPort    int
	healthTLS     ProbeTLS
	probeInterval time.Duration
	holdDown      time.Duration
	drain         bool
	workers       int
	qps           float64
	burst         int
	nodeSelector  string
	leaderElect   bool
	leaseNS       string
	leaseName     string
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	cloud         string
	dnsMinTTL     time.Duration
	dnsMaxTTL     time.Duration
	dnsServer     string
	nodeIdentity  string
	nodeCertLife  time.Duration
	gatewaySA     string
}

// BindFlags defines the controller's flags on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.ConfigFile, "config", "", "YAML configuration file (see docs/controller.md); flags override it")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&f.Source, "source", "kube", `where objects come from: "kube" (the API server) or "dir:/path" (a directory of manifests, no cluster)`)
	fs.StringVar(&f.Identity, "identity", "", "this replica's name in the leader election Lease (default: host name)")
	fs.DurationVar(&f.PollInterval, "poll-interval", 200*time.Millisecond, "how often a dir: source is checked for changes")
	fs.IntVar(&f.reach, "reachability-total-timeout-seconds", DefaultReachabilityTotalTimeoutSeconds, "total timeout of a node reachability check, 0-60; 0 disables the check")
	fs.IntVar(&f.healthPort, "health-port", 9107, "gRPC health port of the gateway agents")
	fs.StringVar(&f.healthTLS.CertFile, "health-tls-cert", "", "mutual TLS for the reachability probe: the controller's client certificate (PEM; with --health-tls-key and --health-tls-ca)")
	fs.StringVar(&f.healthTLS.KeyFile, "health-tls-key", "", "mutual TLS: the client certificate's private key")
	fs.StringVar(&f.healthTLS.CAFile, "health-tls-ca", "", "mutual TLS: the CA the gateways' certificates must chain to")
	fs.StringVar(&f.healthTLS.ServerName, "health-tls-server-name", "", "mutual TLS: the name the gateways' certificate must carry (default "+health.DefaultServerName+")")
	fs.DurationVar(&f.probeInterval, "probe-interval", DefaultProbeInterval, "pause between two reachability checks of a node")
	fs.DurationVar(&f.holdDown, "hold-down", DefaultHoldDown, "how long a recovered node waits before it gets egress IPs again (0 disables)")
	fs.BoolVar(&f.drain, "drain-cordoned", false, "move egress IPs off cordoned (unschedulable) nodes")
	fs.IntVar(&f.workers, "workers", DefaultWorkers, "number of status writers")
	fs.Float64Var(&f.qps, "kube-api-qps", DefaultKubeAPIQPS, "requests per second to the API server (client-side limit)")
	fs.IntVar(&f.burst, "kube-api-burst", DefaultKubeAPIBurst, "burst of requests to the API server above --kube-api-qps")
	fs.StringVar(&f.nodeSelector, "node-selector", "", "label selector a node must also match to host egress IPs, e.g. node-restriction.kubernetes.io/egress-gateway=true (a label kubelets cannot set); empty: the egress-assignable label alone")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader through a Lease so that only one replica acts (kube source)")
	fs.StringVar(&f.leaseNS, "lease-namespace", "egret-system", "namespace of the leader election Lease")
	fs.StringVar(&f.leaseName, "lease-name", "egret-controller", "name of the leader election Lease")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "leader election lease duration")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", 10*time.Second, "leader election renew deadline")
	fs.DurationVar(&f.retryPeriod, "retry-period", 2*time.Second, "leader election retry period")
	fs.StringVar(&f.cloud, "cloud-provider", "", `attach egress IPs to the nodes' cloud interfaces through this cloud's API: "aws", "gcp", "azure", "openstack", or "" (off); see docs/cloud.md`)
	fs.DurationVar(&f.dnsMinTTL, "dns-min-ttl", dnsres.DefaultMinTTL, "EgressIPTraffic dnsNames: shortest time an answer is kept before the name is resolved again (floor of the TTL; also the retry interval after a failure)")
	fs.DurationVar(&f.dnsMaxTTL, "dns-max-ttl", dnsres.DefaultMaxTTL, "EgressIPTraffic dnsNames: longest time an answer is kept (ceiling of the TTL)")
	fs.StringVar(&f.dnsServer, "dns-server", "", "EgressIPTraffic dnsNames: the DNS server to ask (IP[:port]); default: the nameservers of /etc/resolv.conf")
	fs.StringVar(&f.nodeIdentity, "node-identity", "", `"csr": give each gateway node its own certificate through CSRs this controller signs (leader), and probe gateways over mutual TLS bound to the node dialed (docs/identity.md); "" (default): off. Not with --health-tls-*`)
	fs.DurationVar(&f.nodeCertLife, "node-cert-duration", identity.DefaultCertDuration, "with --node-identity=csr: the longest life of an issued certificate (renewed at 2/3 of it)")
	fs.StringVar(&f.gatewaySA, "gateway-service-account", identity.DefaultGatewayServiceAccount, "with --node-identity=csr: namespace:name of the ServiceAccount whose node-bound pod tokens may ask for gateway certificates; the identity CA is kept in its namespace")
	return f
}

// Config reads the configuration file, if any, then applies the flags that
// were set on the command line, and validates the result.
func (f *Flags) Config() (Config, error) {
	var c Config
	if f.ConfigFile != "" {
		var err error
		if c, err = LoadConfig(f.ConfigFile); err != nil {
			return Config{}, err
		}
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "reachability-total-timeout-seconds":
			v := f.reach
			c.ReachabilityTotalTimeoutSeconds = &v
		case "health-port":
			c.HealthPort = f.healthPort
		case "health-tls-cert":
			c.HealthTLS.CertFile = f.healthTLS.CertFile
		case "health-tls-key":
			c.HealthTLS.KeyFile = f.healthTLS.KeyFile
		case "health-tls-ca":
			c.HealthTLS.CAFile = f.healthTLS.CAFile
		case "health-tls-server-name":
			c.HealthTLS.ServerName = f.healthTLS.ServerName
		case "probe-interval":
			c.ProbeInterval = metav1.Duration{Duration: f.probeInterval}
		case "hold-down":
			c.HoldDown = &metav1.Duration{Duration: f.holdDown}
		case "drain-cordoned":
			c.DrainCordoned = f.drain
		case "workers":
			c.Workers = f.workers
		case "kube-api-qps":
			c.KubeAPIQPS = float32(f.qps)
		case "kube-api-burst":
			c.KubeAPIBurst = f.burst
		case "node-selector":
			c.NodeSelector = f.nodeSelector
		case "leader-elect":
			c.LeaderElection.Disabled = !f.leaderElect
		case "lease-namespace":
			c.LeaderElection.Namespace = f.leaseNS
		case "lease-name":
			c.LeaderElection.Name = f.leaseName
		case "lease-duration":
			c.LeaderElection.LeaseDuration.Duration = f.leaseDuration
		case "renew-deadline":
			c.LeaderElection.RenewDeadline.Duration = f.renewDeadline
		case "retry-period":
			c.LeaderElection.RetryPeriod.Duration = f.retryPeriod
		case "cloud-provider":
			c.Cloud.Provider = f.cloud
		case "dns-min-ttl":
			c.DNSMinTTL.Duration = f.dnsMinTTL
		case "dns-max-ttl":
			c.DNSMaxTTL.Duration = f.dnsMaxTTL
		case "dns-server":
			c.DNSServer = f.dnsServer
		case "node-identity":
			c.NodeIdentity = f.nodeIdentity
		case "node-cert-duration":
			c.NodeCertDuration.Duration = f.nodeCertLife
		case "gateway-service-account":
			c.GatewayServiceAccount = f.gatewaySA
		}
	})
	if c.NodeIdentity == NodeIdentityCSR && f.Source != "kube" {
		return Config{}, fmt.Errorf("--node-identity=csr needs --source=kube: the certificates are asked for and issued through the API server (source %q)", f.Source)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// SourceDir returns the directory of a "dir:" source, and whether it is one;
// any other value than "kube" and "dir:/path" is an error.
func (f *Flags) SourceDir() (string, bool, error) {
	switch {
	case f.Source == "kube":
		return "", false, nil
	case strings.HasPrefix(f.Source, "dir:") && len(f.Source) > len("dir:"):
		return strings.TrimPrefix(f.Source, "dir:"), true, nil
	}
	return "", false, fmt.Errorf(`--source %q: use "kube" or "dir:/path/to/manifests"`, f.Source)
}
