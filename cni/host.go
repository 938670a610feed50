package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"
)

// HostConfigName is the node-side settings file, read from the directory of the plugin
// binary. A NetworkAttachmentDefinition is written by namespace users, so anything that
// widens what such a config may do is decided here, by whoever administers the node.
const HostConfigName = "egress-router-host.json"

// HostConfig holds the node administrator's settings; the zero value is the safe default.
type HostConfig struct {
	// AllowMasterTypes adds netlink link kinds (e.g. "veth") that may be a master
	// besides physical NICs and bonds or VLANs over them.
	AllowMasterTypes []string `json:"allowMasterTypes,omitempty"`
	// AllowPassthru permits macvlan mode passthru, which hands the whole NIC to one pod.
	AllowPassthru bool `json:"allowPassthru,omitempty"`
	// AllowCrossNamespaceConfigMaps lets ipConfig.namespace name a namespace other
	// than the pod's.
	AllowCrossNamespaceConfigMaps bool `json:"allowCrossNamespaceConfigMaps,omitempty"`
	// Kubeconfig is the absolute path of the kubeconfig ipConfig reads ConfigMaps with
	// (egress-router install --kubeconfig-dir writes both); empty refuses ipConfig.
	// It lives here and not in the network configuration because those credentials
	// are the node's, and a NetworkAttachmentDefinition's author is not.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// AllowElasticIPs lists the Elastic IPs (allocation IDs or public IPs, as
	// network configurations name them) aws-elastic-ip may associate with pods
	// on this node: the node's instance role can associate any Elastic IP of
	// the account. Empty refuses aws-elastic-ip.
	AllowElasticIPs []string `json:"allowElasticIPs,omitempty"`
	// StateDir is where aws-elastic-ip records what ADD did in EC2, for DEL
	// (absolute; default DefaultStateDir).
	StateDir string `json:"stateDir,omitempty"`
	// NetworkNamespaces binds networks (by their configuration's name) to the
	// namespaces whose pods may join them. Multus lets a pod name a
	// NetworkAttachmentDefinition of another namespace by default, so a
	// network's addresses, the source IP its destinations allow-list, would
	// otherwise go to a pod of any namespace. A Kubernetes pod (CNI_ARGS
	// names its K8S_POD_NAMESPACE) joins a network only if the network's
	// entry, or the entry "*" for the networks not listed, names its
	// namespace or "*"; else it is refused with code 7 before anything
	// changes. The zero value refuses every Kubernetes pod: the node's
	// administrator says which namespace owns which network.
	NetworkNamespaces map[string][]string `json:"networkNamespaces,omitempty"`
}

// AnyNetworkNamespace is, as a key of HostConfig.NetworkNamespaces, every
// network not listed by name, and as a namespace, every namespace.
const AnyNetworkNamespace = "*"

// admitNamespace refuses a pod of namespace ns for network unless
// NetworkNamespaces binds the network to it. A caller that names no
// namespace is no Kubernetes pod (cnitool, a runtime outside Kubernetes,
// run by root on the node): it is refused only by a binding to named
// namespaces, which it cannot show it belongs to.
func (hc HostConfig) admitNamespace(network, ns string) error {
	allowed, ok := hc.NetworkNamespaces[network]
	if !ok {
		allowed, ok = hc.NetworkNamespaces[AnyNetworkNamespace]
	}
	every := slices.Contains(allowed, AnyNetworkNamespace)
	switch {
	case every || (!ok && ns == ""):
		return nil
	case !ok:
		return fmt.Errorf("network %q is bound to no namespace on this node, so no pod may join it (pod namespace %q): the node's %s networkNamespaces must list it (egress-router install -network-namespaces=%s=%s)", network, ns, HostConfigName, network, ns)
	case ns == "":
		return fmt.Errorf("network %q takes pods of namespaces %v only (the node's %s networkNamespaces), and CNI_ARGS names no K8S_POD_NAMESPACE", network, allowed, HostConfigName)
	case !slices.Contains(allowed, ns):
		return fmt.Errorf("network %q takes pods of namespaces %v only (the node's %s networkNamespaces); this pod is in %q", network, allowed, HostConfigName, ns)
	}
	return nil
}

// DefaultStateDir holds the aws-elastic-ip records when StateDir is unset.
const DefaultStateDir = "/var/lib/cni/egress-router"

func (hc HostConfig) stateDir() string {
	if hc.StateDir == "" {
		return DefaultStateDir
	}
	return hc.StateDir
}

// HostConfigPath is where the plugin looks for its host settings: next to its binary.
func HostConfigPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the plugin binary: %w", err)
	}
	return filepath.Join(filepath.Dir(self), HostConfigName), nil
}

// LoadHostConfig reads path; a missing file means the defaults. Unknown fields are an
// error so a misspelt setting is not silently ignored.
func LoadHostConfig(path string) (HostConfig, error) {
	var hc HostConfig
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return hc, nil
	}
	if err != nil {
		return hc, fmt.Errorf("reading the host settings: %w", err)
	}
	if hc, err = ParseHostConfig(b); err != nil {
		return HostConfig{}, fmt.Errorf("host settings %s are invalid: %w", path, err)
	}
	return hc, nil
}

// ParseHostConfig decodes the host settings, refusing unknown fields.
func ParseHostConfig(b []byte) (HostConfig, error) {
	var hc HostConfig
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&hc); err != nil {
		return HostConfig{}, err
	}
	if hc.Kubeconfig != "" && !filepath.IsAbs(hc.Kubeconfig) {
		// The plugin's working directory is the runtime's, not the administrator's.
		return HostConfig{}, fmt.Errorf("kubeconfig %q: give an absolute path", hc.Kubeconfig)
	}
	if hc.StateDir != "" && !filepath.IsAbs(hc.StateDir) {
		return HostConfig{}, fmt.Errorf("stateDir %q: give an absolute path", hc.StateDir)
	}
	if err := checkNetworkNamespaces(hc.NetworkNamespaces); err != nil {
		return HostConfig{}, err
	}
	return hc, nil
}

// checkNetworkNamespaces refuses an empty network name, a network bound to
// no namespace (it would refuse every pod: leave it out instead) and names
// that cannot be namespaces ("*" is every namespace).
func checkNetworkNamespaces(m map[string][]string) error {
	for network, nss := range m {
		if network == "" {
			return errors.New("networkNamespaces: a network name is empty")
		}
		if len(nss) == 0 {
			return fmt.Errorf("networkNamespaces[%q]: no namespace; a network listed takes pods of the namespaces listed only", network)
		}
		for _, ns := range nss {
			if ns == AnyNetworkNamespace {
				continue
			}
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("networkNamespaces[%q]: %q is not a namespace name (or \"*\" for every namespace): %s", network, ns, strings.Join(errs, "; "))
			}
		}
	}
	return nil
}

// physicalKinds are what a master may be without a host setting: a NIC (netlink
// reports a link without a kind as "device"), or a bond or VLAN over allowed links.
// Bridges, tunnels (vxlan, geneve, egret0), veth, dummy, tun and macvlan/ipvlan
// children would give the pod layer-2 access to something that is not the wire.
var physicalKinds = []string{"device", "bond", "vlan"}

// CheckMaster refuses a master that is not a physical-looking Ethernet NIC, a bond, or
// a VLAN over one, unless its kind is allowed host-side. Bond members are not checked:
// creating a bond is already a node administrator's act.
func CheckMaster(h *netlink.Handle, name string, hc HostConfig) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fieldErr("interfaceArgs.master", "host interface %s not found: %v", name, err)
	}
	for depth := 0; ; depth++ {
		a := l.Attrs()
		kind := l.Type()
		allowed := slices.Contains(hc.AllowMasterTypes, kind)
		if !allowed && !slices.Contains(physicalKinds, kind) {
			return fieldErr("interfaceArgs.master", "%s is (over) %s, a %s interface; only physical NICs, bonds and VLANs may be masters (the node's %s allowMasterTypes can add kinds)", name, a.Name, kind, HostConfigName)
		}
		if !allowed && a.EncapType != "" && a.EncapType != "ether" {
			return fieldErr("interfaceArgs.master", "%s is not an Ethernet interface (%s)", name, a.EncapType)
		}
		if kind != "vlan" || allowed {
			return nil
		}
		if depth > 8 || a.ParentIndex == 0 {
			return fieldErr("interfaceArgs.master", "VLAN %s has no parent the plugin can check", name)
		}
		if l, err = h.LinkByIndex(a.ParentIndex); err != nil {
			return fieldErr("interfaceArgs.master", "finding the parent of VLAN %s: %v", name, err)
		}
	}
}

// checkPodAddrs refuses pod addresses that belong to the node or to the master's
// routers: announcing them from the pod would take their traffic over.
func checkPodAddrs(h *netlink.Handle, master HostLink, pod []netip.Prefix, gws ...netip.Addr) error {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("listing the node's addresses: %w", err)
	}
	taken := map[netip.Addr]string{}
	for _, a := range addrs {
		if p, ok := prefixFromIPNet(a.IPNet); ok {
			taken[p.Addr()] = "an address of the node"
		}
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: master.Index, Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return fmt.Errorf("listing host routes of %s: %w", master.Name, err)
	}
	for _, r := range routes {
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			taken[gw.Unmap()] = "a gateway of " + master.Name
		}
	}
	for _, gw := range gws {
		if gw.IsValid() {
			taken[gw] = "the pod's gateway"
		}
	}
	for _, p := range pod {
		if what, ok := taken[p.Addr()]; ok {
			return fieldErr("addresses", "%s is %s; the pod may not take it over", p.Addr(), what)
		}
	}
	return nil
}
