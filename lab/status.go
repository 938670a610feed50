package lab

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/plan"
)

// Status is the lab as `egret lab status --json` prints it.
type Status struct {
	Name string `json:"name"`
	// Up is true when the lab was built (its state file exists).
	Up bool `json:"up"`
	// Mode is the gateway implementation: "kernel", "egret" or "managed".
	Mode string `json:"mode,omitempty"`
	// Underlay is the lab's variant: "ipv4" (dual-stack nodes, IPv4
	// VTEPs) or "ipv6" (IPv6 only, VXLAN over IPv6).
	Underlay string `json:"underlay"`
	// ObjectsDir is the manifest directory of a managed lab (the
	// controller's --source dir:), with status/ and events.log.
	ObjectsDir string `json:"objectsDir,omitempty"`
	// Controller is the `egret controller` process of a managed lab.
	Controller *ProcessStatus `json:"controller,omitempty"`
	// Steer are the `egret steer` processes of a managed lab, per worker.
	Steer []ProcessStatus `json:"steer,omitempty"`
	// Assignment is, in managed mode, each egress IP and the node the
	// controller assigned it to (read from the status files), by object.
	Assignment []AssignmentStatus `json:"assignment,omitempty"`
	// Problems lists what is missing or dead in a lab that is up.
	Problems []string `json:"problems,omitempty"`
	// Server is the first outside server, Servers every one (the first
	// again, then the second, in a destination network of its own).
	Server  ServerStatus   `json:"server"`
	Servers []ServerStatus `json:"servers"`
	// DNS is the lab's DNS server (run by the first server's echo
	// process; `Lab.SetDNS` changes its answers).
	DNS      DNSStatus       `json:"dns"`
	Router   RouterStatus    `json:"router"`
	Workers  []WorkerStatus  `json:"workers"`
	Pods     []PodStatus     `json:"pods"`
	Gateways []GatewayStatus `json:"gateways"`
}

// ProcessStatus is a process the lab runs in one of its namespaces.
type ProcessStatus struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	PID       int    `json:"pid"`
	Running   bool   `json:"running"`
	Log       string `json:"log"`
}

// AssignmentStatus is one egress IP of one EgressIP object; Node is ""
// while the controller has not assigned it. Standby is the node the
// controller recorded to take it over (egret.io/standby), "" for none.
type AssignmentStatus struct {
	EgressIP string     `json:"egressIPObject"`
	IP       netip.Addr `json:"ip"`
	Node     string     `json:"node"`
	Standby  string     `json:"standby,omitempty"`
}

// ServerStatus is the outside echo server.
type ServerStatus struct {
	Namespace string     `json:"namespace"`
	IP        netip.Addr `json:"ip"`
	IP6       netip.Addr `json:"ip6"`
	HTTPPort  int        `json:"httpPort"`
	UDPPort   int        `json:"udpPort"`
	PID       int        `json:"pid,omitempty"`
	Running   bool       `json:"running"`
}

// DNSStatus is the lab's DNS server and its names.
type DNSStatus struct {
	Addr netip.AddrPort `json:"addr"`
	// Names are the names it started with (DNSName, DNSAlias, DNSName2).
	Names []string `json:"names"`
}

// RouterStatus is the router between the fabric and the outside network.
type RouterStatus struct {
	Namespace string     `json:"namespace"`
	IP        netip.Addr `json:"ip"`
	OutsideIP netip.Addr `json:"outsideIP"`
}

// WorkerStatus is a worker node.
type WorkerStatus struct {
	Name      string       `json:"name"`
	Namespace string       `json:"namespace"`
	IP        netip.Addr   `json:"ip"`
	VTEP      netip.Addr   `json:"vtep"`
	Interface string       `json:"tunnelInterface"`
	PodSubnet netip.Prefix `json:"podSubnet"`
}

// PodStatus is a pod and the source address the outside should see.
type PodStatus struct {
	Name      string     `json:"name"`
	Node      string     `json:"node"`
	Namespace string     `json:"namespace"`
	IP        netip.Addr `json:"ip"`
	// KubeNamespace is the pod object's namespace (managed mode).
	KubeNamespace string `json:"kubeNamespace,omitempty"`
	// Policy is the policy (static modes) or EgressIP object (managed)
	// that selects the pod.
	Policy string `json:"policy,omitempty"`
	// EgressIP is the egress IP the pod is expected to use; null when no
	// policy selects it. In managed mode it is the first of EgressIPs.
	EgressIP *netip.Addr `json:"egressIP"`
	// Gateway hosts EgressIP ("" when not steered).
	Gateway string `json:"gateway,omitempty"`
	// EgressIPs and Gateways list every assigned egress IP of the pod's
	// object and the node hosting each: each new connection may use any.
	EgressIPs []netip.Addr `json:"egressIPs,omitempty"`
	Gateways  []string     `json:"gateways,omitempty"`
	// ExpectedSource is what the server sees: EgressIP, or the node's IP.
	ExpectedSource netip.Addr `json:"expectedSource"`
	// ExpectedSources are all the sources the server may see (IPv4).
	ExpectedSources []netip.Addr `json:"expectedSources"`
	// IP6 is the pod's IPv6 address ("" for an IPv4-only pod) and
	// ExpectedSources6 the sources the server may see for its IPv6
	// traffic: its object's assigned IPv6 egress IPs (none: held back), or
	// its node's IPv6 address when not steered.
	IP6              netip.Addr   `json:"ip6"`
	ExpectedSources6 []netip.Addr `json:"expectedSources6,omitempty"`
	// Destinations are, for a pod objects select by destination (managed
	// mode), the source each outside address should see; ExpectedSources
	// and ExpectedSources6 are then the first server's.
	Destinations []DestinationStatus `json:"destinations,omitempty"`
}

// Pod returns the status of the named pod (a zero one when unknown).
func (st *Status) Pod(name string) PodStatus {
	for _, p := range st.Pods {
		if p.Name == name {
			return p
		}
	}
	return PodStatus{}
}

// GatewayStatus is a gateway node.
type GatewayStatus struct {
	Name      string       `json:"name"`
	Namespace string       `json:"namespace"`
	VTEP      netip.Addr   `json:"vtep"`
	Interface string       `json:"interface"`
	EgressIPs []netip.Addr `json:"egressIPs"`
	Policies  []string     `json:"policies"`
	// PID is the `egret gateway` process in egret mode.
	PID int `json:"pid,omitempty"`
}

// Status describes the lab and checks what runs; err is only for an
// unreadable state file.
func (l *Lab) Status() (*Status, error) {
	s := l.Spec
	dir := l.RunDir()
	st := &Status{Name: s.Name, Underlay: s.Underlay(),
		Router: RouterStatus{Namespace: s.NS(s.Router.Name), IP: s.Router.IP, OutsideIP: s.Router.OutIP},
		DNS:    DNSStatus{Addr: s.DNSAddr()},
	}
	for _, v := range s.Servers() {
		st.Servers = append(st.Servers, ServerStatus{Namespace: s.NS(v.Name), IP: v.IP, IP6: v.IP6, HTTPPort: HTTPPort, UDPPort: UDPPort})
	}
	st.Server = st.Servers[0]
	for _, r := range defaultDNSRecords(s) {
		st.DNS.Names = append(st.DNS.Names, r.Name)
	}
	for _, w := range s.Workers {
		st.Workers = append(st.Workers, WorkerStatus{Name: w.Name, Namespace: s.NS(w.Name), IP: w.IP, VTEP: w.IP, Interface: "egv0", PodSubnet: w.PodSubnet})
		for _, p := range w.Pods {
			ps := PodStatus{Name: p.Name, Node: w.Name, Namespace: s.NS(p.Name), IP: p.IP, Policy: p.Policy,
				ExpectedSource: s.ExpectedSource(w, p), ExpectedSources: []netip.Addr{s.ExpectedSource(w, p)}, IP6: p.IP6}
			if p.IP6.IsValid() {
				// The static modes steer IPv4 only: IPv6 leaves through the
				// node's masquerade.
				ps.ExpectedSources6 = []netip.Addr{w.IP6}
			}
			if e, g, ok := s.Steering(p); ok {
				ps.EgressIP, ps.Gateway = &e, g.Name
			}
			st.Pods = append(st.Pods, ps)
		}
	}
	for _, g := range s.Gateways {
		ips, pols := s.Hosted(g.Name)
		if ips == nil {
			ips, pols = []netip.Addr{}, []string{}
		}
		st.Gateways = append(st.Gateways, GatewayStatus{Name: g.Name, Namespace: s.NS(g.Name), VTEP: g.IP, Interface: "eth0", EgressIPs: ips, Policies: pols})
	}

	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if os.IsNotExist(err) {
		if left := Namespaces(s.Name); len(left) > 0 {
			st.Problems = append(st.Problems, fmt.Sprintf("leftover namespaces %s; run `egret lab down --name %s`", strings.Join(left, " "), s.Name))
		}
		return st, nil
	}
	if err != nil {
		return st, err
	}
	var saved state
	if err := json.Unmarshal(b, &saved); err != nil {
		return st, fmt.Errorf("lab state %s is corrupt (%v); run `egret lab down --name %s`", dir, err, s.Name)
	}
	st.Up, st.Mode = true, saved.Mode
	if u := cmp.Or(saved.Underlay, UnderlayIPv4); u != st.Underlay {
		st.Problems = append(st.Problems, fmt.Sprintf("the lab was built with underlay %s, not %s; give --underlay %s", u, st.Underlay, u))
	}
	if saved.Mode == ModeManaged {
		st.managedView(s, dir)
	}
	have := map[string]bool{}
	for _, ns := range Namespaces(s.Name) {
		have[ns] = true
	}
	for _, ns := range s.Namespaces() {
		if !have[ns] {
			st.Problems = append(st.Problems, "namespace "+ns+" is missing")
		}
	}
	for i := range st.Servers {
		v := &st.Servers[i]
		v.PID = readPid(filepath.Join(dir, echoID(i)+".pid"))
		v.Running = alive(v.PID)
		if !v.Running {
			st.Problems = append(st.Problems, "the echo server in "+v.Namespace+" is not running")
		}
	}
	st.Server = st.Servers[0]
	if saved.Mode == ModeEgret || saved.Mode == ModeManaged {
		for i := range st.Gateways {
			g := &st.Gateways[i]
			g.PID = readPid(filepath.Join(dir, "gateway-"+g.Name+".pid"))
			if !alive(g.PID) {
				st.Problems = append(st.Problems, "egret gateway on "+g.Name+" is not running")
			}
		}
	}
	return st, nil
}

// WriteText prints the status for people.
func (st *Status) WriteText(w io.Writer) {
	if !st.Up {
		fmt.Fprintf(w, "lab %s is down\n", st.Name)
		for _, p := range st.Problems {
			fmt.Fprintln(w, "problem:", p)
		}
		return
	}
	fmt.Fprintf(w, "lab %s is up, gateway mode %s\n", st.Name, st.Mode)
	for _, p := range st.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
	fmt.Fprintln(w)
	for _, v := range st.Servers {
		ip6 := ""
		if v.IP6.IsValid() {
			ip6 = " " + v.IP6.String()
		}
		fmt.Fprintf(w, "server   %-10s %v%s  http :%d  udp :%d  (pid %d)\n", v.Namespace, v.IP, ip6, v.HTTPPort, v.UDPPort, v.PID)
	}
	fmt.Fprintf(w, "dns      %v  %s\n", st.DNS.Addr, strings.Join(st.DNS.Names, " "))
	fmt.Fprintf(w, "router   %-10s %v / %v\n\n", st.Router.Namespace, st.Router.IP, st.Router.OutsideIP)
	if st.Controller != nil {
		fmt.Fprintf(w, "controller %-8s pid %d running=%v  objects %s\n", st.Controller.Namespace, st.Controller.PID, st.Controller.Running, st.ObjectsDir)
		for _, p := range st.Steer {
			fmt.Fprintf(w, "steer    %-10s pid %d running=%v\n", p.Namespace, p.PID, p.Running)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-8s %-12s %-9s %-14s %-8s %-26s %s\n", "POD", "NAMESPACE", "K8S NS", "IP", "POLICY", "EGRESS IP", "GATEWAY")
	for _, p := range st.Pods {
		pol, eip, gw, kns := p.Policy, "none ("+p.ExpectedSource.String()+")", p.Gateway, p.KubeNamespace
		if pol == "" {
			pol = "-"
		}
		if kns == "" {
			kns = "-"
		}
		if p.EgressIP != nil {
			eip = p.EgressIP.String()
		}
		if len(p.EgressIPs) > 0 {
			strs := make([]string, len(p.EgressIPs))
			for i, a := range p.EgressIPs {
				strs[i] = a.String()
			}
			eip, gw = strings.Join(strs, ","), strings.Join(p.Gateways, ",")
		} else if pol != "-" && p.EgressIP == nil {
			eip = "unassigned (held back)"
		}
		if gw == "" {
			gw = "-"
		}
		fmt.Fprintf(w, "%-8s %-12s %-9s %-14v %-8s %-26s %s\n", p.Name, p.Namespace, kns, p.IP, pol, eip, gw)
	}
	fmt.Fprintf(w, "\n%-8s %-12s %-14s %-9s %s\n", "GATEWAY", "NAMESPACE", "VTEP", "IFACE", "EGRESS IPS")
	for _, g := range st.Gateways {
		ips := make([]string, len(g.EgressIPs))
		for i, a := range g.EgressIPs {
			ips[i] = a.String() + " (" + g.Policies[i] + ")"
		}
		if len(ips) == 0 {
			ips = []string{"- (spare)"}
		}
		fmt.Fprintf(w, "%-8s %-12s %-14v %-9s %s\n", g.Name, g.Namespace, g.VTEP, g.Interface, strings.Join(ips, ", "))
	}
	if len(st.Pods) > 0 {
		fmt.Fprintf(w, "\ntry: ip netns exec %s curl -s 'http://%v/'\n", st.Pods[0].Namespace, netip.AddrPortFrom(st.Server.IP, uint16(st.Server.HTTPPort)))
	}
}

// DestinationStatus is the source an outside address should see from a pod
// that objects select by destination (managed mode).
type DestinationStatus struct {
	// Destination is an outside server's address, or the address the lab's
	// objects exclude (Server.Excluded).
	Destination netip.Addr `json:"destination"`
	// EgressIPObject is the object whose egress IPs the traffic uses, ""
	// when it leaves as the node.
	EgressIPObject string `json:"egressIPObject,omitempty"`
	// Excluded says an exclusion decided that it leaves as the node.
	Excluded bool `json:"excluded,omitempty"`
	// ExpectedSources are the sources the destination may see.
	ExpectedSources []netip.Addr `json:"expectedSources"`
}

// podDestinations lists, for a pod some object selects by destination, the
// source each outside address of the lab should see (nil for other pods:
// every destination sees the same source).
func podDestinations(s *Spec, pl *plan.Plan, w WorkerNode, p Pod, sources func(WorkerNode, string, bool) []netip.Addr) []DestinationStatus {
	i := slices.IndexFunc(pl.Pods, func(x plan.Pod) bool { return x.Namespace == p.KubeNamespace && x.Name == p.Name })
	if i < 0 || pl.Pods[i].Dest == nil {
		return nil
	}
	var dsts []netip.Addr
	for _, v := range s.Servers() {
		dsts = append(dsts, v.IP)
		if p.IP6.IsValid() && v.IP6.IsValid() {
			dsts = append(dsts, v.IP6)
		}
		if v.Excluded.IsValid() {
			dsts = append(dsts, v.Excluded)
		}
	}
	var out []DestinationStatus
	for _, d := range dsts {
		owner, excluded := ownerOf(pl, p, d)
		out = append(out, DestinationStatus{Destination: d, EgressIPObject: owner, Excluded: excluded, ExpectedSources: sources(w, owner, d.Is6())})
	}
	return out
}

// managedView replaces the static assignment with the controller's: which
// object selects each pod (evaluated from the manifests) and where its
// egress IPs are (status files); it also reports the control-plane processes.
func (st *Status) managedView(s *Spec, dir string) {
	objs := ObjectsDir(dir)
	st.ObjectsDir = objs
	proc := func(id, ns string) ProcessStatus {
		pid := readPid(filepath.Join(dir, id+".pid"))
		return ProcessStatus{Name: id, Namespace: ns, PID: pid, Running: alive(pid), Log: filepath.Join(dir, id+".log")}
	}
	c := proc("controller", s.NS(s.Controller.Name))
	st.Controller = &c
	if !c.Running {
		st.Problems = append(st.Problems, "egret controller is not running")
	}
	for _, w := range s.Workers {
		p := proc("steer-"+w.Name, s.NS(w.Name))
		st.Steer = append(st.Steer, p)
		if !p.Running {
			st.Problems = append(st.Problems, "egret steer on "+w.Name+" is not running")
		}
	}
	view, err := objectsView(objs)
	if err != nil {
		st.Problems = append(st.Problems, "reading the EgressIP objects: "+err.Error())
	}
	eips := make([]egressv1.EgressIP, len(view.EgressIPs))
	for i, e := range view.EgressIPs {
		eips[i] = *e
	}
	pl := plan.Build(view, plan.Options{})
	hosted := map[string][]netip.Addr{}
	owner := map[string][]string{}
	for _, e := range eips {
		standbys, err := egressv1.Standbys(&e)
		if err != nil {
			st.Problems = append(st.Problems, err.Error())
		}
		for _, ipStr := range e.Spec.EgressIPs {
			ip, _ := netip.ParseAddr(ipStr)
			a := AssignmentStatus{EgressIP: e.Name, IP: ip, Standby: standbys[ip]}
			for _, it := range e.Status.Items {
				if it.EgressIP == ipStr {
					a.Node = it.Node
					hosted[it.Node] = append(hosted[it.Node], ip)
					owner[it.Node] = append(owner[it.Node], e.Name)
				}
			}
			st.Assignment = append(st.Assignment, a)
		}
	}
	for i := range st.Gateways {
		g := &st.Gateways[i]
		g.EgressIPs, g.Policies = hosted[g.Name], owner[g.Name]
		if g.EgressIPs == nil {
			g.EgressIPs, g.Policies = []netip.Addr{}, []string{}
		}
	}
	// sources are what a server sees of pod p's traffic leaving as object
	// owner: its assigned egress IPs of the family of v6, none when it has
	// none (held back: fail closed), the node's address when owner is "".
	sources := func(w WorkerNode, owner string, v6 bool) []netip.Addr {
		if owner == "" {
			if v6 && w.IP6.IsValid() {
				return []netip.Addr{w.IP6}
			}
			return []netip.Addr{w.IP} // an IPv6-only lab's node has one address
		}
		var out []netip.Addr
		for _, a := range st.Assignment {
			if a.EgressIP == owner && a.Node != "" && a.IP.Is6() == v6 {
				out = append(out, a.IP)
			}
		}
		return out
	}
	i := 0
	for _, w := range s.Workers {
		for _, p := range w.Pods {
			ps := &st.Pods[i]
			i++
			ps.KubeNamespace, ps.Policy, ps.EgressIP, ps.Gateway = p.KubeNamespace, "", nil, ""
			// The pod's primary family is the first server's (IPv6 in an
			// IPv6-only lab, where p.IP is IPv6).
			owner, _ := ownerOf(pl, p, s.Server.IP)
			ps.ExpectedSources = sources(w, owner, p.IP.Is6())
			ps.ExpectedSources6 = nil
			if p.IP6.IsValid() {
				owner6, _ := ownerOf(pl, p, s.Server.IP6)
				ps.ExpectedSources6 = sources(w, owner6, true)
			}
			ps.Destinations = podDestinations(s, pl, w, p, sources)
			ps.ExpectedSource = w.IP
			if owner == "" {
				continue
			}
			ps.Policy = owner
			for _, a := range st.Assignment {
				if a.EgressIP == owner && a.Node != "" {
					ps.EgressIPs = append(ps.EgressIPs, a.IP)
					ps.Gateways = append(ps.Gateways, a.Node)
				}
			}
			if len(ps.ExpectedSources) > 0 {
				j := slices.Index(ps.EgressIPs, ps.ExpectedSources[0])
				ps.EgressIP, ps.Gateway, ps.ExpectedSource = &ps.EgressIPs[j], ps.Gateways[j], ps.EgressIPs[j]
			} else {
				ps.ExpectedSource = netip.Addr{} // selected but unassigned: traffic is held back (fail closed)
			}
		}
	}
}
