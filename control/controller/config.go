package controller

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/dnsres"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/identity"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Values of Config.NodeIdentity.
const (
	NodeIdentityOff = ""
	NodeIdentityCSR = "csr"
)

// Defaults of the configuration.
const (
	DefaultReachabilityTotalTimeoutSeconds = 1
	MaxReachabilityTotalTimeoutSeconds     = 60
	DefaultProbeInterval                   = 300 * time.Millisecond
	DefaultHoldDown                        = 30 * time.Second
	// DefaultWorkers status writers: a write is a round trip to the API
	// server and etcd, so a few in flight keep it busy (bench/controlplane,
	// 2,000 statuses: 2.8 and 5.0 s with 8 writers, 3.8 and 5.9 s with 2).
	DefaultWorkers = 8
	// DefaultKubeAPIQPS and DefaultKubeAPIBurst bound the controller's own
	// requests. client-go's defaults (5 and 10) would take 33 minutes to
	// write the statuses of 10,000 new EgressIPs; the API server's priority
	// and fairness protects it, so the client limit only stops a runaway.
	DefaultKubeAPIQPS   = 1000
	DefaultKubeAPIBurst = 2000
)

// Config is the controller's configuration file (YAML); flags override it.
// Durations are written as Go durations ("30s", "250ms").
type Config struct {
	// ReachabilityTotalTimeoutSeconds bounds each node reachability check,
	// retries included; a node that does not answer within it is declared
	// down and its egress IPs move. 0 disables the check; 1 to 60; nil
	// means the default, 1.
	ReachabilityTotalTimeoutSeconds *int `json:"reachabilityTotalTimeoutSeconds,omitempty"`
	// HealthPort is the gRPC health port of the gateway agents (9107).
	HealthPort int `json:"healthPort,omitempty"`
	// HealthTLS makes the reachability probe mutually authenticated (off
	// when no file is named); see ProbeTLS.
	HealthTLS ProbeTLS `json:"healthTLS,omitzero"`
	// ProbeInterval is the pause between two checks of one node. Failure is
	// detected within ProbeInterval + the total timeout.
	ProbeInterval metav1.Duration `json:"probeInterval,omitempty"`
	// HoldDown keeps a node that has just come back (Ready again, reachable
	// again) from receiving egress IPs for this long, so a flapping node
	// does not pull IPs back and forth. "0s" disables it.
	HoldDown *metav1.Duration `json:"holdDown,omitempty"`
	// DrainCordoned moves egress IPs off cordoned (unschedulable) nodes.
	DrainCordoned bool `json:"drainCordoned,omitempty"`
	// NodeSelector is a label selector (kubectl -l syntax) a node must
	// match, besides carrying k8s.ovn.org/egress-assignable, to host
	// egress IPs. A kubelet may set that label on its own Node; choose a
	// label it cannot set, such as one under node-restriction.kubernetes.io/
	// (the NodeRestriction admission plugin refuses those from kubelets),
	// so only an admin makes a node a gateway. Empty (default): the label
	// alone decides, as in OVN-Kubernetes.
	NodeSelector string `json:"nodeSelector,omitempty"`
	// Workers is the number of status writers.
	Workers int `json:"workers,omitempty"`
	// KubeAPIQPS and KubeAPIBurst limit the requests per second to the API
	// server (client side); 0 means the default.
	KubeAPIQPS   float32 `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst int     `json:"kubeAPIBurst,omitempty"`
	// LeaderElection configures the Lease used with the Kubernetes source.
	LeaderElection LeaderElection `json:"leaderElection,omitzero"`
	// DNSMinTTL and DNSMaxTTL are the floor and ceiling of the time a
	// resolved spec.dnsNames entry of an EgressIPTraffic is kept before it
	// is resolved again, whatever the answer's TTL (0: the defaults, 5s
	// and 30m). A failed resolution is tried again after DNSMinTTL.
	DNSMinTTL metav1.Duration `json:"dnsMinTTL,omitempty"`
	DNSMaxTTL metav1.Duration `json:"dnsMaxTTL,omitempty"`
	// DNSServer is the DNS server ("192.0.2.53", "[2001:db8::53]:5353")
	// the names are resolved with; empty: the nameservers of
	// /etc/resolv.conf, the cluster DNS the pods use too.
	DNSServer string `json:"dnsServer,omitempty"`
	// NodeIdentity "csr" gives every gateway node its own certificate
	// (docs/identity.md): the leader signs the gateways' CSRs, every
	// replica holds the identity CA, and the reachability probe runs over
	// mutual TLS with the controller's own certificate, accepting only the
	// certificate of the node it dialed. "" (default): off. It replaces
	// HealthTLS: giving both is an error.
	NodeIdentity string `json:"nodeIdentity,omitempty"`
	// NodeCertDuration caps the life of the certificates issued with
	// NodeIdentity (default 24h); they are renewed at 2/3 of it.
	NodeCertDuration metav1.Duration `json:"nodeCertDuration,omitempty"`
	// GatewayServiceAccount is the ServiceAccount ("namespace:name",
	// default egret-system:egret-gateway) whose node-bound pod tokens may
	// ask for gateway certificates; the identity CA lives in its namespace.
	GatewayServiceAccount string `json:"gatewayServiceAccount,omitempty"`
	// Cloud turns on attaching egress IPs to the nodes' cloud interfaces
	// (docs/cloud.md); off by default.
	Cloud cloud.Config `json:"cloud,omitzero"`
}

// LeaderElection configures leader election through a coordination.k8s.io Lease.
type LeaderElection struct {
	// Disabled runs without a Lease (a single replica, or tests).
	Disabled bool `json:"disabled,omitempty"`
	// Namespace and Name locate the Lease (egret-system/egret-controller).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// LeaseDuration, RenewDeadline and RetryPeriod are as in client-go
	// (15s, 10s, 2s by default).
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	RetryPeriod   metav1.Duration `json:"retryPeriod,omitempty"`
}

// LoadConfig reads a YAML configuration file; unknown fields are errors,
// so a misspelt option is not silently ignored.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading the controller configuration: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("controller configuration %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("controller configuration %s: %w", path, err)
	}
	return c, nil
}

// Validate reports every out-of-range value.
func (c Config) Validate() error {
	var errs []error
	if t := c.ReachabilityTotalTimeoutSeconds; t != nil && (*t < 0 || *t > MaxReachabilityTotalTimeoutSeconds) {
		errs = append(errs, fmt.Errorf("reachabilityTotalTimeoutSeconds is %d; it must be between 0 and %d (0 disables the reachability check)", *t, MaxReachabilityTotalTimeoutSeconds))
	}
	if c.HealthPort < 0 || c.HealthPort > 65535 {
		errs = append(errs, fmt.Errorf("healthPort is %d; it must be a TCP port (1-65535, default %d)", c.HealthPort, health.DefaultPort))
	}
	if err := c.HealthTLS.files().Check(); err != nil {
		errs = append(errs, fmt.Errorf("healthTLS: %w", err))
	}
	switch c.NodeIdentity {
	case NodeIdentityOff:
	case NodeIdentityCSR:
		if c.HealthTLS.files().Enabled() {
			errs = append(errs, errors.New("nodeIdentity csr and the healthTLS files (--health-tls-*) both secure the reachability probe: choose one"))
		}
	default:
		errs = append(errs, fmt.Errorf("nodeIdentity is %q; it must be %q or empty (off)", c.NodeIdentity, NodeIdentityCSR))
	}
	if c.NodeCertDuration.Duration < 0 {
		errs = append(errs, fmt.Errorf("nodeCertDuration is %v; it must be positive (0: the default %v)", c.NodeCertDuration.Duration, identity.DefaultCertDuration))
	}
	if c.GatewayServiceAccount != "" {
		if _, _, err := identity.SplitServiceAccount(c.GatewayServiceAccount); err != nil {
			errs = append(errs, fmt.Errorf("gatewayServiceAccount: %w", err))
		}
	}
	if c.ProbeInterval.Duration < 0 {
		errs = append(errs, fmt.Errorf("probeInterval is %v; it must be positive", c.ProbeInterval.Duration))
	}
	if c.HoldDown != nil && c.HoldDown.Duration < 0 {
		errs = append(errs, fmt.Errorf("holdDown is %v; it must be zero or positive", c.HoldDown.Duration))
	}
	if _, err := labels.Parse(c.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("nodeSelector %q is not a label selector such as node-restriction.kubernetes.io/egress-gateway=true: %w", c.NodeSelector, err))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers is %d; it must be positive", c.Workers))
	}
	if err := c.dnsTTLs().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("dnsMinTTL, dnsMaxTTL (--dns-min-ttl, --dns-max-ttl; 0: the default): %w", err))
	}
	if c.DNSServer != "" {
		if _, err := dnsres.ParseServer(c.DNSServer); err != nil {
			errs = append(errs, fmt.Errorf("dnsServer: %w", err))
		}
	}
	if err := c.Cloud.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cloud: %w", err))
	}
	if c.KubeAPIQPS < 0 || c.KubeAPIBurst < 0 {
		errs = append(errs, fmt.Errorf("kubeAPIQPS %v and kubeAPIBurst %d must be positive (0: the defaults %d and %d)", c.KubeAPIQPS, c.KubeAPIBurst, DefaultKubeAPIQPS, DefaultKubeAPIBurst))
	}
	le := c.LeaderElection
	if le.LeaseDuration.Duration < 0 || le.RenewDeadline.Duration < 0 || le.RetryPeriod.Duration < 0 {
		errs = append(errs, errors.New("leaderElection durations must be positive"))
	}
	return errors.Join(errs...)
}

// dnsTTLs is the DNS TTL floor and ceiling, defaults filled in; a
// negative value stays, for Validate to refuse.
func (c Config) dnsTTLs() dnsres.TTLs {
	t := dnsres.TTLs{Min: c.DNSMinTTL.Duration, Max: c.DNSMaxTTL.Duration}
	if t.Min == 0 {
		t.Min = dnsres.DefaultMinTTL
	}
	if t.Max == 0 {
		t.Max = dnsres.DefaultMaxTTL
	}
	return t
}

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	if c.ReachabilityTotalTimeoutSeconds == nil {
		v := DefaultReachabilityTotalTimeoutSeconds
		c.ReachabilityTotalTimeoutSeconds = &v
	}
	if c.HealthPort == 0 {
		c.HealthPort = health.DefaultPort
	}
	if c.ProbeInterval.Duration == 0 {
		c.ProbeInterval.Duration = DefaultProbeInterval
	}
	if c.HoldDown == nil {
		c.HoldDown = &metav1.Duration{Duration: DefaultHoldDown}
	}
	ttls := c.dnsTTLs()
	c.DNSMinTTL.Duration, c.DNSMaxTTL.Duration = ttls.Min, ttls.Max
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.NodeCertDuration.Duration == 0 {
		c.NodeCertDuration.Duration = identity.DefaultCertDuration
	}
	if c.GatewayServiceAccount == "" {
		c.GatewayServiceAccount = identity.DefaultGatewayServiceAccount
	}
	if c.KubeAPIQPS == 0 {
		c.KubeAPIQPS = DefaultKubeAPIQPS
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = max(DefaultKubeAPIBurst, int(c.KubeAPIQPS))
	}
	le := &c.LeaderElection
	if le.Namespace == "" {
		le.Namespace = "egret-system"
	}
	if le.Name == "" {
		le.Name = "egret-controller"
	}
	if le.LeaseDuration.Duration == 0 {
		le.LeaseDuration.Duration = 15 * time.Second
	}
	if le.RenewDeadline.Duration == 0 {
		le.RenewDeadline.Duration = 10 * time.Second
	}
	if le.RetryPeriod.Duration == 0 {
		le.RetryPeriod.Duration = 2 * time.Second
	}
	return c
}
