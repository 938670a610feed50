package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/health"
	labexamples "github.com/egret-gw/egret/deploy/examples/lab"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ModeManaged runs the real control plane: `egret controller` (file source)
// assigns the egress IPs of deploy/examples/lab, `egret gateway --node`
// agents serve them on g1–g3 and `egret steer` programs w1 and w2.
const ModeManaged = "managed"

// Kubernetes names the manifests use.
const (
	labelEgressAssignable = "k8s.ovn.org/egress-assignable"
	annotationPrimaryIf   = "k8s.ovn.org/node-primary-ifaddr"
	annotationVTEP        = "egret.io/vtep"
	// HealthPort is where gateway agents serve the gRPC health check.
	HealthPort = 9107
)

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

// AgentAvailable reports whether binary's gateway command has the agent
// mode managed mode runs (--node, --source).
func AgentAvailable(binary string) bool {
	out, _ := exec.Command(binary, "gateway", "--help").CombinedOutput()
	return strings.Contains(string(out), "-node") && strings.Contains(string(out), "-source")
}

// ObjectsDir is the manifest directory of a managed lab: the Node,
// Namespace and Pod objects the lab writes, the EgressIP manifests, and the
// controller's status/ and events.log.
func ObjectsDir(runDir string) string { return filepath.Join(runDir, "objects") }

// Start implements Impl: run `egret gateway --node <gw> --source dir:...`
// in the gateway namespace and wait until its health service answers.
func (m Managed) Start(env GatewayEnv) error {
	if !AgentAvailable(m.Binary) {
		return fmt.Errorf("%s has no gateway agent mode (egret gateway --node --source) yet; managed mode needs it", m.Binary)
	}
	if err := offloadsOff(env.NS, "eth0"); err != nil {
		return err
	}
	id := "gateway-" + env.Gateway.Name
	pid, err := startDaemon(env.RunDir, id, env.NS, m.Binary, "gateway",
		"--node", env.Gateway.Name, "--source", "dir:"+ObjectsDir(env.RunDir), "--iface", "eth0")
	if err != nil {
		return err
	}
	hc := netip.AddrPortFrom(env.Gateway.IP, HealthPort).String()
	return waitServing(env.NS, hc, pid, filepath.Join(env.RunDir, id+".log"), 15*time.Second)
}

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
	pid := readPid(filepath.Join(l.RunDir(), "gateway-"+gw+".pid"))
	if !alive(pid) {
		return fmt.Errorf("egret gateway on %s is not running", gw)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill egret gateway on %s (pid %d): %w", gw, pid, err)
	}
	for deadline := time.Now().Add(3 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("egret gateway on %s (pid %d) survived SIGKILL", gw, pid)
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
	ctlCfg := fmt.Sprintf("# written by egret lab up (managed mode)\nreachabilityTotalTimeoutSeconds: %d\nprobeInterval: %v\nholdDown: %v\n",
		m.reach(), probeInterval, m.holdDown())
	ctlPath := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(ctlPath, []byte(ctlCfg), 0o644); err != nil {
		return err
	}
	if _, err := startDaemon(dir, "controller", s.NS(s.Controller.Name), l.Binary, "controller",
		"--source", "dir:"+objs, "--config", ctlPath, "--poll-interval", "100ms"); err != nil {
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

// podCIDR is the smallest prefix holding every worker's pod subnet of one
// family (the zero Prefix when the workers have no IPv6 pod subnet).
func podCIDR(s *Spec, v6 bool) netip.Prefix {
	sub := func(w Worker) netip.Prefix {
		if v6 {
			return w.PodSubnet6
		}
		return w.PodSubnet
	}
	p := sub(s.Workers[0])
	if !p.IsValid() {
		return p
	}
	for bits := p.Bits(); bits > 0; bits-- {
		c, _ := p.Addr().Prefix(bits)
		all := true
		for _, w := range s.Workers {
			all = all && c.Contains(sub(w).Addr())
		}
		if all {
			return c
		}
	}
	return p
}

// writeObjects writes the Kubernetes objects of the lab into dir: Nodes,
// Namespaces, Pods (what a cluster would have) and the EgressIP manifests
// of deploy/examples/lab, unchanged.
func writeObjects(s *Spec, dir string, dualStack bool) error {
	// status/ is the controller's, but agents started before it read the
	// folder and never create it (filesource.NewReadOnly).
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o755); err != nil {
		return err
	}
	var nodes, nss, pods []any
	node := func(name string, ip, ip6 netip.Addr, assignable bool) *corev1.Node {
		n := &corev1.Node{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{"kubernetes.io/hostname": name},
				Annotations: map[string]string{
					annotationPrimaryIf: primaryIfAddr(ip, s.NodeSubnet, ip6, s.NodeSubnet6),
					annotationVTEP:      ip.String(),
				}},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}},
			},
		}
		if assignable {
			n.Labels[labelEgressAssignable] = ""
		}
		return n
	}
	for _, w := range s.Workers {
		n := node(w.Name, w.IP, w.IP6, false)
		// The pod CIDRs let the steer agent fail closed for pods it has not
		// classified yet (failClosed: podCIDR, its default).
		n.Spec.PodCIDRs = []string{w.PodSubnet.String()}
		if dualStack && w.PodSubnet6.IsValid() {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, w.PodSubnet6.String())
		}
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
		nodes = append(nodes, n)
		for _, p := range w.Pods {
			pods = append(pods, &corev1.Pod{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.KubeNamespace, Labels: p.Labels},
				Spec:       corev1.PodSpec{NodeName: w.Name, Containers: []corev1.Container{{Name: "app", Image: "lab"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP.String(), PodIPs: podIPs(p)},
			})
		}
	}
	for _, g := range s.Gateways {
		nodes = append(nodes, node(g.Name, g.IP, g.IP6, true))
	}
	for _, ns := range s.KubeNamespaces {
		nss = append(nss, &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: ns.Labels}})
	}
	for file, objs := range map[string][]any{"nodes.yaml": nodes, "namespaces.yaml": nss, "pods.yaml": pods} {
		var b bytes.Buffer
		b.WriteString("# written by egret lab up: what a cluster would hold\n")
		for _, o := range objs {
			y, err := yaml.Marshal(o)
			if err != nil {
				return err
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return fs.WalkDir(labexamples.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (path == DualStackManifest && !dualStack) {
			return err
		}
		b, err := labexamples.Manifests.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "egressip-"+path), b, 0o644)
	})
}

// primaryIfAddr is the k8s.ovn.org/node-primary-ifaddr annotation of a
// node: its fabric address per family, with the subnet's prefix length
// (the subnet decides which egress IPs the node may host).
func primaryIfAddr(ip netip.Addr, subnet netip.Prefix, ip6 netip.Addr, subnet6 netip.Prefix) string {
	if !ip6.IsValid() {
		return fmt.Sprintf(`{"ipv4":"%v/%d"}`, ip, subnet.Bits())
	}
	return fmt.Sprintf(`{"ipv4":"%v/%d","ipv6":"%v/%d"}`, ip, subnet.Bits(), ip6, subnet6.Bits())
}

// podIPs is a pod's status.podIPs: IPv4 first, then IPv6 when it has one.
func podIPs(p Pod) []corev1.PodIP {
	ips := []corev1.PodIP{{IP: p.IP.String()}}
	if p.IP6.IsValid() {
		ips = append(ips, corev1.PodIP{IP: p.IP6.String()})
	}
	return ips
}

// EgressIPs reads the EgressIP objects of a managed lab's manifest
// directory, with the status the controller wrote (status/<name>.yaml),
// sorted by name.
func EgressIPs(objectsDir string) ([]egressv1.EgressIP, error) {
	files, err := filepath.Glob(filepath.Join(objectsDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []egressv1.EgressIP
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var e egressv1.EgressIP
			if err := dec.Decode(&e); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if e.Kind != egressv1.Kind || e.Name == "" {
				continue
			}
			// The controller's status file (filesource.ReadStatus's format;
			// lab cannot import filesource: metrics' lab tests would then
			// import metrics through the controller).
			e.Status = egressv1.EgressIPStatus{}
			if sb, err := os.ReadFile(filepath.Join(objectsDir, "status", e.Name+".yaml")); err == nil {
				var st egressv1.EgressIP
				if err := yaml.Unmarshal(sb, &st); err != nil {
					return nil, fmt.Errorf("status of %s: %w", e.Name, err)
				}
				e.Status = st.Status
			}
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b egressv1.EgressIP) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Selecting returns the EgressIP that selects pod p (the first by name when
// several do, as the steer agent does), or nil.
func (s *Spec) Selecting(eips []egressv1.EgressIP, p Pod) *egressv1.EgressIP {
	var nsLabels map[string]string
	found := false
	for _, ns := range s.KubeNamespaces {
		if ns.Name == p.KubeNamespace {
			nsLabels, found = ns.Labels, true
		}
	}
	if !found {
		return nil
	}
	for i := range eips {
		e := &eips[i]
		nsSel, err := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
		if err != nil || !nsSel.Matches(labels.Set(nsLabels)) {
			continue
		}
		podSel, err := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
		if err != nil || !podSel.Matches(labels.Set(p.Labels)) {
			continue
		}
		return e
	}
	return nil
}

// WaitAssigned waits until every EgressIP of the managed lab has each of
// its egress IPs assigned to a node, and returns them.
func (l *Lab) WaitAssigned(limit time.Duration) ([]egressv1.EgressIP, error) {
	objs := ObjectsDir(l.RunDir())
	deadline := time.Now().Add(limit)
	for {
		eips, err := EgressIPs(objs)
		if err == nil && len(eips) > 0 && fullyAssigned(eips) {
			return eips, nil
		}
		if time.Now().After(deadline) {
			var have []string
			for _, e := range eips {
				have = append(have, fmt.Sprintf("%s %v", e.Name, e.Status.Items))
			}
			return nil, fmt.Errorf("the controller has not assigned every egress IP after %v (%s; err %v); controller log: %s",
				limit, strings.Join(have, "; "), err, tail(filepath.Join(l.RunDir(), "controller.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fullyAssigned(eips []egressv1.EgressIP) bool {
	for _, e := range eips {
		if len(e.Status.Items) != len(e.Spec.EgressIPs) {
			return false
		}
	}
	return true
}

// WaitSources waits until a UDP echo from every pod is seen by the server
// with one of the pod's expected sources (its object's assigned egress
// IPs, or its node's IP), and the same over IPv6 from every dual-stack pod
// with an IPv6 source to expect.
func (l *Lab) WaitSources(limit time.Duration) error {
	s := l.Spec
	deadline := time.Now().Add(limit)
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			for _, v6 := range []bool{false, true} {
				srv := netip.AddrPortFrom(s.Server.IP, UDPPort).String()
				if v6 {
					if !p.IP6.IsValid() || !s.Server.IP6.IsValid() {
						continue
					}
					srv = netip.AddrPortFrom(s.Server.IP6, UDPPort).String()
				}
				var last string
				for ok := false; !ok; {
					st, err := l.Status()
					if err != nil {
						return err
					}
					if !st.Up {
						// Up has not written its state file yet: read the
						// controller's assignment all the same, not the
						// static one.
						st.managedView(s, l.RunDir())
					}
					want := st.Pod(p.Name).ExpectedSources
					if v6 {
						want = st.Pod(p.Name).ExpectedSources6
					}
					if len(want) == 0 {
						break // selected, but no egress IP of this family: held back
					}
					got, err := UDPSource(s.NS(p.Name), srv, 300*time.Millisecond)
					ok = err == nil && slices.Contains(want, got.Addr())
					if !ok {
						last = fmt.Sprintf("server %s saw %v (err %v), want one of %v", srv, got, err, want)
						if time.Now().After(deadline) {
							return fmt.Errorf("pod %s: no UDP echo with the expected source within %v: %s; steer log: %s",
								p.Name, limit, last, tail(filepath.Join(l.RunDir(), "steer-"+w.Name+".log")))
						}
						time.Sleep(50 * time.Millisecond)
					}
				}
			}
		}
	}
	return nil
}

// UDPSource sends one datagram from namespace ns to the echo server at srv
// on a new socket and returns the source the server saw.
func UDPSource(ns, srv string, timeout time.Duration) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := DialContext(ctx, ns, "udp", srv)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	if _, err := c.Write([]byte("source?")); err != nil {
		return netip.AddrPort{}, err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return netip.AddrPort{}, err
	}
	head, _, _ := strings.Cut(string(buf[:n]), "\n")
	return netip.ParseAddrPort(strings.TrimSpace(head))
}
