package lab

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/egret-gw/egret/control/health"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ModeManaged runs the real control plane: `egret controller` (file source)
// assigns the egress IPs of deploy/examples/lab, `egret gateway --node`
// agents serve them on g1–g3 and `egret steer` programs w1 and w2.
const ModeManaged = "managed"

// HealthPort is where gateway agents serve the gRPC health check.
const HealthPort = 9107

// Managed is the managed mode. Its Start runs the gateway agent of one
// gateway node; the lab starts the controller and the steer agents after
// the gateways (startControlPlane).
type Managed struct {
	// Binary is the egret binary.
	Binary string
	// ReachabilityTotalTimeoutSeconds is the controller's check timeout (default 1).
	ReachabilityTotalTimeoutSeconds int
	// HoldDown keeps a returned gateway from new egress IPs (default 5 s,
	// short so that the demo and the failover test can show it).
	HoldDown time.Duration
	// DualStack also applies the dual-stack EgressIP of deploy/examples/lab
	// (dual.yaml: 192.0.2.104 and 2001:db8:2::104 for pod w1-p3). Without
	// it w1-p3 is selected by no object and the lab has the three IPv4
	// egress IPs of blue and green only. NewImpl and `egret demo` set it.
	DualStack bool
	// Cloud, when set, makes the gateway nodes AWS instances: their Nodes
	// name an ENI (eni-<gateway>) in cloud.network.openshift.io/egress-ipconfig
	// and the controller runs with cloud.provider aws, so each egress IP is
	// attached through the EC2 API before a gateway serves it
	// (docs/cloud.md). It is called once the controller's namespace exists,
	// before the controller starts, to make the EC2 API reachable from
	// there; the controller inherits the AWS SDK's environment (endpoint,
	// region, credentials) from this process.
	Cloud func(controllerNS string) error
	// FlowLimits, when set, go into each gateway agent's --config file.
	FlowLimits
	// SyncOff runs the gateway agents without the flow sync's key: no
	// standby holds their flows (the benchmark's baseline for what the
	// sync costs; with it, a failover breaks the connections whose port
	// was not preserved).
	SyncOff bool
	// FenceAfter is the gateway agents' --fence-after (default: theirs,
	// 3 s). The benchmark's overload trials starve the agent (its core's
	// real-time NAPI thread runs above it) for longer than that.
	FenceAfter time.Duration
	// ControllerLease is the gateway agents' --controller-lease (default:
	// theirs, tls, which takes no lease in the lab: its probes are plain
	// gRPC). The fault harness passes "any": nothing but the controller
	// probes the gateways' namespaces.
	ControllerLease string
	// NATLogOff runs the gateway agents without the NAT log (by default
	// each logs into NATLogDir, which `egret natlog --lab` reads).
	NATLogOff bool
}

// DualStackManifest is the manifest of deploy/examples/lab that only
// Managed.DualStack applies.
const DualStackManifest = "dual.yaml"

// Default managed-mode timings.
const (
	DefaultReachabilitySeconds = 1
	DefaultHoldDown            = 5 * time.Second
	probeInterval              = 200 * time.Millisecond
)

// Mode implements Impl.
func (Managed) Mode() string { return ModeManaged }

func (m Managed) reach() int {
	if m.ReachabilityTotalTimeoutSeconds <= 0 {
		return DefaultReachabilitySeconds
	}
	return m.ReachabilityTotalTimeoutSeconds
}

func (m Managed) holdDown() time.Duration {
	if m.HoldDown <= 0 {
		return DefaultHoldDown
	}
	return m.HoldDown
}

// ObjectsDir is the manifest directory of a managed lab: the Node,
// Namespace and Pod objects the lab writes, the EgressIP manifests, and the
// controller's status/ and events.log.
func ObjectsDir(runDir string) string { return filepath.Join(runDir, "objects") }

// GatewayObjectsDir is where gateway gw reads the objects (its --source
// dir:): a symbolic link to ObjectsDir of its own, so that one gateway can
// lose the "API server" alone (the fault harness takes the link away).
func GatewayObjectsDir(runDir, gw string) string {
	return filepath.Join(runDir, "objects-"+gw)
}

// gatewayObjectsLink makes GatewayObjectsDir point at ObjectsDir.
func gatewayObjectsLink(runDir, gw string) (string, error) {
	link := GatewayObjectsDir(runDir, gw)
	if _, err := os.Lstat(link); err == nil {
		return link, nil
	}
	if err := os.Symlink(filepath.Base(ObjectsDir(runDir)), link); err != nil {
		return "", fmt.Errorf("linking %s's object directory: %w", gw, err)
	}
	return link, nil
}

// syncKey returns the flow sync key file the managed lab's gateways share,
// written with a fresh random key on first use.
func syncKey(runDir string) (string, error) {
	path := filepath.Join(runDir, "flow-sync.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	b := make([]byte, 48)
	rand.Read(b)
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)), 0o600); err != nil {
		return "", fmt.Errorf("write the lab's flow sync key: %w", err)
	}
	return path, nil
}

// Start implements Impl: run `egret gateway --node <gw> --source dir:...`
// in the gateway namespace and wait until its health service answers.
func (m Managed) Start(env GatewayEnv) error {
	if err := offloadsOff(env.NS, "eth0"); err != nil {
		return err
	}
	id := "gateway-" + env.Gateway.Name
	objs, err := gatewayObjectsLink(env.RunDir, env.Gateway.Name)
	if err != nil {
		return err
	}
	args := []string{"gateway", "--node", env.Gateway.Name, "--source", "dir:" + objs, "--iface", "eth0",
		"--state-file", StateFile(env.RunDir, env.Gateway.Name), "--flows-socket", FlowsSocket(env.RunDir, env.Gateway.Name)}
	if m.FenceAfter > 0 {
		args = append(args, "--fence-after", m.FenceAfter.String())
	}
	if m.ControllerLease != "" {
		args = append(args, "--controller-lease", m.ControllerLease)
	}
	if !m.NATLogOff {
		args = append(args, "--natlog-dir", NATLogDir(env.RunDir, env.Gateway.Name))
	}
	if !m.SyncOff {
		key, err := syncKey(env.RunDir)
		if err != nil {
			return err
		}
		args = append(args, "--sync-key-file", key, "--sync-addr", netip.AddrPortFrom(env.Gateway.IP, 9108).String())
	}
	if m.FlowLimits != (FlowLimits{}) {
		cfg := "# written by egret lab up (managed mode); format in docs/gateway-agent.md\n"
		for _, f := range []struct {
			key string
			v   int
		}{{"conntrackMax", m.ConntrackMax}, {"podFlowLimit", m.PodFlowLimit}, {"egressIPFlowLimit", m.EgressIPFlowLimit}} {
			if f.v != 0 {
				cfg += fmt.Sprintf("%s: %d\n", f.key, f.v)
			}
		}
		path := filepath.Join(env.RunDir, id+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return err
		}
		args = append(args, "--config", path)
	}
	pid, err := startGatewayDaemon(env.RunDir, id, env.NS, m.Binary, args...)
	if err != nil {
		return err
	}
	hc := netip.AddrPortFrom(env.Gateway.IP, HealthPort).String()
	return waitServing(env.NS, hc, pid, filepath.Join(env.RunDir, id+".log"), 15*time.Second)
}

// NATLogDir is where gateway gw of the lab in runDir writes its NAT log;
// their parent, NATLogDir(runDir, ""), holds every gateway's.
func NATLogDir(runDir, gw string) string { return filepath.Join(runDir, "natlog", gw) }

// FlowsSocket is where gateway gw of a managed lab lists its flows
// (`egret flows --socket`).
func FlowsSocket(runDir, gw string) string { return filepath.Join(runDir, "flows-"+gw+".sock") }

// waitServing waits until the gateway agent's health service in ns says
// SERVING, i.e. its data plane runs with a configuration (and has removed
// whatever a killed predecessor left claimed), failing early when process
// pid exits. An open port alone is not enough: the agent listens before
// its data plane is up.
func waitServing(ns, addr string, pid int, logPath string, limit time.Duration) error {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return DialContext(ctx, ns, "tcp", a) }))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: health.Service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("status %s", resp.GetStatus())
		}
		if !alive(pid) {
			return fmt.Errorf("egret gateway agent in %s exited during start; log: %s", ns, tail(logPath))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("egret gateway agent in %s is not SERVING on %s after %v: %v; log: %s", ns, addr, limit, err, tail(logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillGateway stops gateway gw's agent and data plane the hard way
// (SIGKILL, as a crashed node would) and returns once the process is gone.
func (l *Lab) KillGateway(gw string) error {
	if l.Spec.Gateway(gw) == nil {
		return fmt.Errorf("no gateway %q in lab %s", gw, l.Spec.Name)
	}
	return l.kill("gateway-"+gw, "egret gateway on "+gw)
}

// KillController stops the managed lab's `egret controller` with SIGKILL
// (a crashed controller pod) and returns once the process is gone.
func (l *Lab) KillController() error { return l.kill("controller", "egret controller") }

// kill sends SIGKILL to the lab's daemon id and waits until it is gone;
// what names it in errors.
func (l *Lab) kill(id, what string) error {
	pid := readPid(filepath.Join(l.RunDir(), id+".pid"))
	if !alive(pid) {
		return fmt.Errorf("%s is not running", what)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", what, pid, err)
	}
	for deadline := time.Now().Add(3 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) survived SIGKILL", what, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// StartGateway starts gateway gw's implementation again (after KillGateway).
func (l *Lab) StartGateway(gw string) error {
	g := l.Spec.Gateway(gw)
	if g == nil {
		return fmt.Errorf("no gateway %q in lab %s", gw, l.Spec.Name)
	}
	return l.impl().Start(GatewayEnv{Spec: l.Spec, Gateway: *g, NS: l.Spec.NS(gw), RunDir: l.RunDir()})
}

// startControlPlane runs the controller in the controller namespace and a
// steer agent on each worker, then waits until every EgressIP is fully
// assigned and every selected pod leaves with one of its egress IPs.
func (l *Lab) startControlPlane() error {
	s, dir := l.Spec, l.RunDir()
	m, _ := l.impl().(Managed)
	objs := ObjectsDir(dir)
	// The lab's DNS resolves EgressIPTraffic dnsNames, re-read at most
	// every second so a test sees an answer change soon.
	ctlCfg := fmt.Sprintf("# written by egret lab up (managed mode)\nreachabilityTotalTimeoutSeconds: %d\nprobeInterval: %v\nholdDown: %v\ndnsServer: %q\ndnsMinTTL: 1s\n",
		m.reach(), probeInterval, m.holdDown(), s.DNSAddr().String())
	if m.Cloud != nil {
		if err := m.Cloud(s.NS(s.Controller.Name)); err != nil {
			return fmt.Errorf("preparing the cloud API for the controller: %w", err)
		}
		ctlCfg += "cloud: {provider: aws}\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "controller.yaml"), []byte(ctlCfg), 0o644); err != nil {
		return err
	}
	if err := l.StartController(); err != nil {
		return err
	}
	for _, w := range s.Workers {
		cluster, nodes := []string{podCIDR(s, false).String()}, []string{s.NodeSubnet.String()}
		if p6 := podCIDR(s, true); p6.IsValid() {
			cluster = append(cluster, p6.String())
		}
		if s.NodeSubnet6.IsValid() {
			nodes = append(nodes, s.NodeSubnet6.String())
		}
		cfg := fmt.Sprintf("# written by egret lab up (managed mode); format in docs/steer.md\nunderlay: eth0\nvni: %d\nport: %d\nclusterCIDRs: [%s]\nnodeCIDRs: [%s]\n",
			VNI, VXLANPort, strings.Join(cluster, ", "), strings.Join(nodes, ", "))
		path := filepath.Join(dir, "steer-"+w.Name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return err
		}
		if _, err := startDaemon(dir, "steer-"+w.Name, s.NS(w.Name), l.Binary, "steer",
			"--node", w.Name, "--source", "dir:"+objs, "--config", path); err != nil {
			return err
		}
	}
	l.warmNeighbours()
	if _, err := l.WaitAssigned(20 * time.Second); err != nil {
		return err
	}
	return l.WaitSources(15 * time.Second)
}

// StartController runs the managed lab's `egret controller` in the
// controller namespace with the configuration the lab wrote
// (controller.yaml): at Up, and again after KillController.
func (l *Lab) StartController() error {
	dir := l.RunDir()
	_, err := startDaemon(dir, "controller", l.Spec.NS(l.Spec.Controller.Name), l.Binary, "controller",
		"--source", "dir:"+ObjectsDir(dir), "--config", filepath.Join(dir, "controller.yaml"), "--poll-interval", "100ms")
	return err
}

// warmNeighbours has each gateway's kernel resolve the router (IPv4 and
// IPv6) and every worker's VTEP, as the background traffic between the
// nodes of a real cluster would. The data plane does not queue a packet
// whose next hop is unresolved: it drops it and asks the kernel to
// resolve (gateway.md), so without this the first packet of every
// gateway/worker pair would be lost and each probe of Up and the demo
// would wait for a retry. One datagram to the discard port per neighbour
// is enough; nothing needs to answer.
func (l *Lab) warmNeighbours() {
	s := l.Spec
	targets := []netip.Addr{s.Router.IP, s.Router.IP6}
	for _, w := range s.Workers {
		targets = append(targets, w.IP)
	}
	for _, g := range s.Gateways {
		for _, a := range targets {
			if !a.IsValid() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			if c, err := DialContext(ctx, s.NS(g.Name), "udp", netip.AddrPortFrom(a, 9).String()); err == nil {
				c.Write([]byte("neighbour"))
				c.Close()
			}
			cancel()
		}
	}
}
