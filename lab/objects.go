package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/plan"
	labexamples "github.com/egret-gw/egret/deploy/examples/lab"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// podCIDR is the smallest prefix holding every worker's pod subnet of one
// family (the zero Prefix when the workers have no IPv6 pod subnet).
func podCIDR(s *Spec, v6 bool) netip.Prefix {
	sub := func(w WorkerNode) netip.Prefix {
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

// CloudENI is the ENI of gateway node gw in a cloud lab (Managed.Cloud).
func CloudENI(gw string) string { return "eni-" + gw }

// writeObjects writes the Kubernetes objects of the lab into dir: Nodes,
// Namespaces, Pods (what a cluster would have) and the EgressIP manifests
// of deploy/examples/lab, unchanged. With cloud the gateway nodes are AWS
// instances: each names its ENI, eni-<name>, in its egress-ipconfig.
func writeObjects(s *Spec, dir string, dualStack, cloud bool) error {
	// status/ is the controller's, but agents started before it read the
	// folder and never create it (cluster.NewDirReader).
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
					cluster.AnnotationPrimaryIfAddr: primaryIfAddr(ip, s.NodeSubnet, ip6, s.NodeSubnet6),
					cluster.AnnotationVTEP:          ip.String(),
				}},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}},
			},
		}
		if assignable {
			n.Labels[cluster.LabelEgressAssignable] = ""
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
		n := node(g.Name, g.IP, g.IP6, true)
		if cloud {
			n.Annotations[cluster.AnnotationEgressIPConfig] = cluster.FormatEgressIPConfig(cluster.CloudConfig{
				Interface: CloudENI(g.Name),
				IfAddr:    cluster.IfAddr{IPv4: s.NodeSubnet, IPv6: s.NodeSubnet6},
				Capacity:  cluster.Capacity{IPv4: 10, IPv6: 10},
			})
		}
		nodes = append(nodes, n)
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
	manifests := fs.FS(labexamples.Manifests)
	if s.IPv6Only() {
		var err error
		if manifests, err = fs.Sub(labexamples.IPv6, "ipv6"); err != nil {
			return err
		}
	}
	return fs.WalkDir(manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (path == DualStackManifest && !dualStack) {
			return err
		}
		b, err := fs.ReadFile(manifests, path)
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
	if ip.Is6() {
		return fmt.Sprintf(`{"ipv6":"%v/%d"}`, ip, subnet.Bits())
	}
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

// objectsView reads a managed lab's manifest directory as the agents do
// (a cluster.Dir reader), with the status the controller wrote
// (status/<name>.yaml).
func objectsView(objectsDir string) (cluster.View, error) {
	var logs bytes.Buffer
	d, err := cluster.NewDirReader(objectsDir, 0, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return cluster.View{}, err
	}
	d.Reload()
	if d.Errors.Load() > 0 {
		return cluster.View{}, fmt.Errorf("%s holds documents that cannot be used: %s", objectsDir, strings.TrimSpace(logs.String()))
	}
	if _, err := d.Check(context.Background()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return cluster.View{}, err
	}
	return d.View(), nil
}

// EgressIPs reads the EgressIP objects of a managed lab's manifest
// directory (objectsView), sorted by name.
func EgressIPs(objectsDir string) ([]egressv1.EgressIP, error) {
	v, err := objectsView(objectsDir)
	if err != nil {
		return nil, err
	}
	out := make([]egressv1.EgressIP, len(v.EgressIPs))
	for i, e := range v.EgressIPs {
		out[i] = *e
	}
	return out, nil
}

// ownerOf returns the EgressIP object whose egress IPs pod p uses towards
// dst as plan pl decides it, "" when it leaves as its node: no object
// selects it, none claims dst, or an exclusion does (excluded).
func ownerOf(pl *plan.Plan, p Pod, dst netip.Addr) (owner string, excluded bool) {
	i := slices.IndexFunc(pl.Pods, func(x plan.Pod) bool { return x.Namespace == p.KubeNamespace && x.Name == p.Name })
	if i < 0 || !dst.IsValid() {
		return "", false
	}
	owner, excluded = pl.Pods[i].OwnerFor(dst)
	if excluded {
		return "", true
	}
	return owner, false
}
