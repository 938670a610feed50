package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Status is the lab as `egret lab status --json` prints it.
type Status struct {
	Name string `json:"name"`
	// Up is true when the lab was built (its state file exists).
	Up bool `json:"up"`
	// Mode is the gateway implementation: "kernel" or "egret".
	Mode string `json:"mode,omitempty"`
	// Problems lists what is missing or dead in a lab that is up.
	Problems []string        `json:"problems,omitempty"`
	Server   ServerStatus    `json:"server"`
	Router   RouterStatus    `json:"router"`
	Workers  []WorkerStatus  `json:"workers"`
	Pods     []PodStatus     `json:"pods"`
	Gateways []GatewayStatus `json:"gateways"`
}

// ServerStatus is the outside echo server.
type ServerStatus struct {
	Namespace string     `json:"namespace"`
	IP        netip.Addr `json:"ip"`
	HTTPPort  int        `json:"httpPort"`
	UDPPort   int        `json:"udpPort"`
	PID       int        `json:"pid,omitempty"`
	Running   bool       `json:"running"`
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
	Policy    string     `json:"policy,omitempty"`
	// EgressIP is the egress IP the pod is expected to use; null when no
	// policy selects it.
	EgressIP *netip.Addr `json:"egressIP"`
	// Gateway hosts EgressIP ("" when not steered).
	Gateway string `json:"gateway,omitempty"`
	// ExpectedSource is what the server sees: EgressIP, or the node's IP.
	ExpectedSource netip.Addr `json:"expectedSource"`
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
	st := &Status{Name: s.Name,
		Server: ServerStatus{Namespace: s.NS(s.Server.Name), IP: s.Server.IP, HTTPPort: HTTPPort, UDPPort: UDPPort},
		Router: RouterStatus{Namespace: s.NS(s.Router.Name), IP: s.Router.IP, OutsideIP: s.Router.OutIP},
	}
	for _, w := range s.Workers {
		st.Workers = append(st.Workers, WorkerStatus{Name: w.Name, Namespace: s.NS(w.Name), IP: w.IP, VTEP: w.IP, Interface: "egv0", PodSubnet: w.PodSubnet})
		for _, p := range w.Pods {
			ps := PodStatus{Name: p.Name, Node: w.Name, Namespace: s.NS(p.Name), IP: p.IP, Policy: p.Policy, ExpectedSource: s.ExpectedSource(w, p)}
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
	have := map[string]bool{}
	for _, ns := range Namespaces(s.Name) {
		have[ns] = true
	}
	for _, ns := range s.Namespaces() {
		if !have[ns] {
			st.Problems = append(st.Problems, "namespace "+ns+" is missing")
		}
	}
	st.Server.PID = readPid(filepath.Join(dir, "echo.pid"))
	st.Server.Running = alive(st.Server.PID)
	if !st.Server.Running {
		st.Problems = append(st.Problems, "the echo server is not running")
	}
	if saved.Mode == ModeEgret {
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
	fmt.Fprintf(w, "\nserver   %-10s %v  http :%d  udp :%d  (pid %d)\n", st.Server.Namespace, st.Server.IP, st.Server.HTTPPort, st.Server.UDPPort, st.Server.PID)
	fmt.Fprintf(w, "router   %-10s %v / %v\n\n", st.Router.Namespace, st.Router.IP, st.Router.OutsideIP)
	fmt.Fprintf(w, "%-8s %-12s %-14s %-8s %-14s %s\n", "POD", "NAMESPACE", "IP", "POLICY", "EGRESS IP", "GATEWAY")
	for _, p := range st.Pods {
		pol, eip, gw := p.Policy, "none ("+p.ExpectedSource.String()+")", p.Gateway
		if pol == "" {
			pol = "-"
		}
		if p.EgressIP != nil {
			eip = p.EgressIP.String()
		}
		if gw == "" {
			gw = "-"
		}
		fmt.Fprintf(w, "%-8s %-12s %-14v %-8s %-14s %s\n", p.Name, p.Namespace, p.IP, pol, eip, gw)
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
		fmt.Fprintf(w, "\ntry: ip netns exec %s curl -s http://%v:%d/\n", st.Pods[0].Namespace, st.Server.IP, st.Server.HTTPPort)
	}
}
