package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// CloudPrivateIPConfigGVR is the per-IP attachment state of egress IPs on
// a cloud, with the shape of OpenShift's cloud.network.openshift.io/v1
// CloudPrivateIPConfig, so tools that know that API show Egret's.
var CloudPrivateIPConfigGVR = schema.GroupVersionResource{Group: "cloud.network.openshift.io", Version: "v1", Resource: "cloudprivateipconfigs"}

// CloudPrivateIPConfigKind is the object kind of CloudPrivateIPConfigGVR.
const CloudPrivateIPConfigKind = "CloudPrivateIPConfig"

// ConditionAssigned is the condition of a CloudPrivateIPConfig: True once
// the cloud shows the IP on status.node's interface, False after an API
// error, Unknown while the cloud has accepted a change it does not show yet.
const ConditionAssigned = "Assigned"

// Reasons of the Assigned condition, as OpenShift's cloud network config
// controller writes them.
const (
	ReasonCloudResponseSuccess = "CloudResponseSuccess"
	ReasonCloudResponseError   = "CloudResponseError"
	ReasonCloudResponsePending = "CloudResponsePending"
)

// CloudIP is one CloudPrivateIPConfig: the desired node of an egress IP
// (spec.node) and where the cloud has it (status.node, with Assigned).
type CloudIP struct {
	IP         netip.Addr
	SpecNode   string
	StatusNode string
	Conditions []metav1.Condition
}

// Attached reports whether the cloud shows the IP on node's interface.
func (c CloudIP) Attached(node string) bool {
	return node != "" && c.StatusNode == node && meta.IsStatusConditionTrue(c.Conditions, ConditionAssigned)
}

// CloudIPName is the object name of ip's CloudPrivateIPConfig: an IPv4
// address as written, an IPv6 address as its 8 groups of 4 hex digits
// joined by dots (a name may not hold ':'), as OVN-Kubernetes names them.
func CloudIPName(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	b := ip.As16()
	h := hex.EncodeToString(b[:])
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = h[4*i : 4*i+4]
	}
	return strings.Join(groups, ".")
}

// parseCloudIPName is CloudIPName's inverse.
func parseCloudIPName(name string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(name); err == nil && ip.Is4() {
		return ip, nil
	}
	if ip, err := netip.ParseAddr(strings.ReplaceAll(name, ".", ":")); err == nil && ip.Is6() {
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("%s name %q is not an IPv4 address nor an IPv6 address written with dots", CloudPrivateIPConfigKind, name)
}

type cloudIPJSON struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Node string `json:"node"`
	} `json:"spec"`
	Status struct {
		Node       string             `json:"node"`
		Conditions []metav1.Condition `json:"conditions"`
	} `json:"status"`
}

func (c CloudIP) object() cloudIPJSON {
	var j cloudIPJSON
	j.APIVersion = CloudPrivateIPConfigGVR.GroupVersion().String()
	j.Kind = CloudPrivateIPConfigKind
	j.Name = CloudIPName(c.IP)
	j.Spec.Node = c.SpecNode
	j.Status.Node, j.Status.Conditions = c.StatusNode, c.Conditions
	if j.Status.Conditions == nil {
		j.Status.Conditions = []metav1.Condition{}
	}
	return j
}

func (j cloudIPJSON) cloudIP() (CloudIP, error) {
	ip, err := parseCloudIPName(j.Name)
	if err != nil {
		return CloudIP{}, err
	}
	return CloudIP{IP: ip, SpecNode: j.Spec.Node, StatusNode: j.Status.Node, Conditions: j.Status.Conditions}, nil
}

// ListCloudIPs lists the CloudPrivateIPConfig objects from the API server.
// Objects whose name is not an IP are left out and named in the error.
func (s *Kube) ListCloudIPs(ctx context.Context) ([]CloudIP, error) {
	l, err := s.dyn.Resource(CloudPrivateIPConfigGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s (is its CRD installed, from deploy/?): %w", CloudPrivateIPConfigGVR.GroupResource(), err)
	}
	var out []CloudIP
	var bad []string
	for _, u := range l.Items {
		var j cloudIPJSON
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &j); err != nil {
			bad = append(bad, u.GetName())
			continue
		}
		ci, err := j.cloudIP()
		if err != nil {
			bad = append(bad, j.Name)
			continue
		}
		out = append(out, ci)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s objects %v are not Egret's (their names are not IPs); ignored", CloudPrivateIPConfigKind, bad)
	}
	return out, nil
}

// StoreCloudIP creates or updates c's CloudPrivateIPConfig, spec and
// status (a subresource, written second).
func (s *Kube) StoreCloudIP(ctx context.Context, c CloudIP) error {
	j := c.object()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&j)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	r := s.dyn.Resource(CloudPrivateIPConfigGVR)
	opts := metav1.UpdateOptions{FieldManager: Component}
	cur, err := r.Get(ctx, j.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if cur, err = r.Create(ctx, u, metav1.CreateOptions{FieldManager: Component}); err != nil {
			return fmt.Errorf("creating %s %s: %w", CloudPrivateIPConfigKind, j.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", CloudPrivateIPConfigKind, j.Name, err)
	default:
		u.SetResourceVersion(cur.GetResourceVersion())
		if cur, err = r.Update(ctx, u, opts); err != nil {
			return fmt.Errorf("updating %s %s: %w", CloudPrivateIPConfigKind, j.Name, err)
		}
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	if _, err := r.UpdateStatus(ctx, u, opts); err != nil {
		return fmt.Errorf("updating the status of %s %s: %w", CloudPrivateIPConfigKind, j.Name, err)
	}
	return nil
}

// DeleteCloudIP deletes ip's CloudPrivateIPConfig; a missing one is gone already.
func (s *Kube) DeleteCloudIP(ctx context.Context, ip netip.Addr) error {
	err := s.dyn.Resource(CloudPrivateIPConfigGVR).Delete(ctx, CloudIPName(ip), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s: %w", CloudPrivateIPConfigKind, CloudIPName(ip), err)
	}
	return nil
}

// CloudIPDir is where the file source keeps the CloudPrivateIPConfig
// objects, one <name>.yaml each, inside its directory.
const CloudIPDir = "cloudprivateipconfigs"

// ListCloudIPs implements CloudIPs for the file source: the files of
// cloudprivateipconfigs/ (none yet is no object).
func (s *Dir) ListCloudIPs(context.Context) ([]CloudIP, error) {
	dir := filepath.Join(s.dir, CloudIPDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []CloudIP{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	out := []CloudIP{}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		var j cloudIPJSON
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = yaml.UnmarshalStrict(b, &j)
		}
		var ci CloudIP
		if err == nil {
			ci, err = j.cloudIP()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err))
			continue
		}
		out = append(out, ci)
	}
	return out, errors.Join(errs...)
}

// StoreCloudIP implements CloudIPs for the file source.
func (s *Dir) StoreCloudIP(_ context.Context, c CloudIP) error {
	if s.readOnly {
		return ErrReadOnly
	}
	dir := filepath.Join(s.dir, CloudIPDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	b, err := yaml.Marshal(c.object())
	if err == nil {
		err = writeAtomic(filepath.Join(dir, CloudIPName(c.IP)+".yaml"), b)
	}
	if err != nil {
		return fmt.Errorf("writing %s %s: %w", CloudPrivateIPConfigKind, CloudIPName(c.IP), err)
	}
	return nil
}

// DeleteCloudIP implements CloudIPs for the file source.
func (s *Dir) DeleteCloudIP(_ context.Context, ip netip.Addr) error {
	if s.readOnly {
		return ErrReadOnly
	}
	err := os.Remove(filepath.Join(s.dir, CloudIPDir, CloudIPName(ip)+".yaml"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s %s: %w", CloudPrivateIPConfigKind, CloudIPName(ip), err)
	}
	return nil
}

// CloudIPs stores the CloudPrivateIPConfig objects of a Source (Kube, Dir).
type CloudIPs interface {
	ListCloudIPs(ctx context.Context) ([]CloudIP, error)
	StoreCloudIP(ctx context.Context, c CloudIP) error
	DeleteCloudIP(ctx context.Context, ip netip.Addr) error
}
