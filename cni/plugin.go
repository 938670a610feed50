package cni

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	nlns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Versions are the CNI spec versions the plugin speaks: every one the CNI library
// supports, as upstream's plugin does, so configurations without cniVersion (0.1.0)
// work unchanged.
var Versions = version.All

// Plugin holds the commands; ConfigMaps is replaceable for unit tests.
type Plugin struct {
	// ConfigMaps builds the ConfigMap reader for ipConfig; nil uses the kubeconfig.
	ConfigMaps func(c *Config) (ConfigMapGetter, error)
	// Host overrides the host settings; nil reads HostConfigName next to the binary.
	Host *HostConfig
}

// hostConfig returns the node administrator's settings.
func (p *Plugin) hostConfig() (HostConfig, error) {
	if p.Host != nil {
		return *p.Host, nil
	}
	path, err := HostConfigPath()
	if err != nil {
		return HostConfig{}, types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	hc, err := LoadHostConfig(path)
	if err != nil {
		return HostConfig{}, types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return hc, nil
}

// Funcs returns the skel command table.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}

// cniErr turns any failure into a CNI error with the code that fits it.
func cniErr(err error, fallback uint) error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	var fe *FieldError
	code := fallback
	switch {
	case errors.As(err, &fe):
		code = types.ErrInvalidNetworkConfig
		if errors.Is(err, errAPIUnavailable) {
			code = types.ErrTryAgainLater
		}
	case errors.Is(err, ErrNoIPvlan):
		code = types.ErrPluginNotAvailable
	case errors.Is(err, errEC2Unavailable):
		code = types.ErrTryAgainLater
	case errors.Is(err, errNoAWS):
		code = types.ErrPluginNotAvailable
	case errors.Is(err, errNetNS):
		code = types.ErrInvalidNetNS
	}
	return types.NewError(code, err.Error(), "")
}

var errAPIUnavailable = errors.New("the API server is unavailable")

// errNetNS marks a pod network namespace that cannot be opened.
var errNetNS = errors.New("cannot open the pod's network namespace")

func (p *Plugin) load(args *skel.CmdArgs) (*Config, PodArgs, error) {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, PodArgs{}, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
		}
		return nil, PodArgs{}, types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	pod, err := ParseArgs(args.Args)
	if err != nil {
		return nil, PodArgs{}, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	return c, pod, nil
}

func (p *Plugin) resolve(c *Config, pod PodArgs, hc HostConfig) (IPSettings, error) {
	var cms ConfigMapGetter
	if c.IPConfig != nil {
		// Checked before any client exists: the plugin's identity may read ConfigMaps
		// the NetworkAttachmentDefinition's author may not.
		if ns := c.IPConfig.Namespace; ns != "" && ns != pod.Namespace && !hc.AllowCrossNamespaceConfigMaps {
			return IPSettings{}, fieldErr("ipConfig.namespace", "%q is not the pod's namespace %q; the node's %s does not allow other namespaces (allowCrossNamespaceConfigMaps)", ns, pod.Namespace, HostConfigName)
		}
		var err error
		if p.ConfigMaps != nil {
			cms, err = p.ConfigMaps(c)
		} else if cms, err = NewKubeConfigMaps(hc.Kubeconfig); err != nil {
			return IPSettings{}, types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
		}
		if err != nil {
			return IPSettings{}, err
		}
		cms = apiErrors{cms}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return ResolveIP(ctx, c, pod, cms)
}

// apiErrors marks transport failures so they become "try again later".
type apiErrors struct{ ConfigMapGetter }

func (a apiErrors) ConfigMapData(ctx context.Context, ns, name string) (map[string]string, error) {
	d, err := a.ConfigMapGetter.ConfigMapData(ctx, ns, name)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		err = fmt.Errorf("%w: %w", errAPIUnavailable, err)
	}
	return d, err
}

// plan decides master, gateways and routes from the host's state; gws are gateways
// already known (CHECK without the ConfigMap takes them from prevResult).
func plan(host *netlink.Handle, c *Config, ip IPSettings, ifName string, hc HostConfig, gws ...netip.Addr) (*Plan, error) {
	links, err := HostLinks(host)
	if err != nil {
		return nil, err
	}
	var master HostLink
	if c.Master != "" {
		i := slices.IndexFunc(links, func(l HostLink) bool { return l.Name == c.Master })
		if i < 0 {
			return nil, fieldErr("interfaceArgs.master", "host interface %q does not exist", c.Master)
		}
		master = links[i]
	} else if master, err = InferMaster(links, ip.Addresses); err != nil {
		return nil, err
	}
	if err := CheckMaster(host, master.Name, hc); err != nil {
		return nil, err
	}
	if ip, err = ip.WithLengths(master); err != nil {
		return nil, err
	}
	for _, r := range ip.Redirects {
		if !slices.ContainsFunc(ip.Addresses, func(a netip.Prefix) bool { return a.Addr().Is4() == r.To.Addr().Is4() }) {
			return nil, fieldErr("destinations", "the redirect of port %d/%s to %s needs an address of its IP family in addresses to leave from", r.Port, r.Proto, r.To.Addr())
		}
	}
	typ := c.InterfaceType
	if c.EIP != nil {
		typ = InterfaceIPvlan
	}
	p := &Plan{IfName: ifName, Type: typ, Mode: c.Mode, MTU: c.MTU, Master: master, IP: ip}
	if p.GW4, p.GW6, err = Gateways(host, master, ip, gws...); err != nil {
		return nil, err
	}
	if err := checkPodAddrs(host, master, ip.Addresses, p.GW4, p.GW6); err != nil {
		return nil, err
	}
	p.Keep = append(slices.Clone(c.ClusterNetworks), c.ServiceNetworks...)
	// A macvlan/ipvlan child cannot talk to its own master, so the pod reaches the
	// master's addresses through the pod network instead.
	for _, m := range master.Prefixes {
		p.MasterIPs = append(p.MasterIPs, netip.PrefixFrom(m.Addr(), m.Addr().BitLen()))
	}
	return p, nil
}

func openPod(args *skel.CmdArgs) (ns.NetNS, *netlink.Handle, error) {
	podNS, err := ns.GetNS(args.Netns)
	if err != nil {
		return nil, nil, types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("opening the pod's network namespace %q: %v", args.Netns, err), "")
	}
	h, err := netlink.NewHandleAt(nlns.NsHandle(int(podNS.Fd())))
	if err != nil {
		podNS.Close()
		return nil, nil, cniErr(fmt.Errorf("opening netlink in the pod: %w", err), types.ErrInternal)
	}
	return podNS, h, nil
}

// loadWithPrev is how ADD and CHECK start: the config and the pod's
// arguments, refusing an interface type that cannot work here, with the
// prevResult parsed.
func (p *Plugin) loadWithPrev(args *skel.CmdArgs) (*Config, PodArgs, HostConfig, error) {
	c, pod, err := p.load(args)
	if err != nil {
		return nil, PodArgs{}, HostConfig{}, err
	}
	hc, err := p.hostConfig()
	if err != nil {
		return nil, PodArgs{}, HostConfig{}, err
	}
	if err := refusePassthru(c, hc, types.ErrInvalidNetworkConfig); err != nil {
		return nil, PodArgs{}, HostConfig{}, err
	}
	if err := version.ParsePrevResult(&c.Raw.NetConf); err != nil {
		return nil, PodArgs{}, HostConfig{}, types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	return c, pod, hc, nil
}

// refusePassthru refuses macvlan passthru, which gives the pod the NIC itself and with
// it the node's traffic, unless the node's settings allow it; code is the CNI error
// code of the command asking.
func refusePassthru(c *Config, hc HostConfig, code uint) error {
	if c.InterfaceType == InterfaceMacvlan && c.Mode == "passthru" && !hc.AllowPassthru {
		return types.NewError(code, fmt.Sprintf("interfaceArgs.mode: passthru is not allowed on this node (the node's %s can set allowPassthru)", HostConfigName), "")
	}
	return nil
}

// planPod resolves the pod's addresses and plans its interface from the
// host's links (host is a netlink handle in the host's namespace).
func (p *Plugin) planPod(host *netlink.Handle, c *Config, pod PodArgs, ifName string, hc HostConfig) (*Plan, error) {
	if err := hc.admitNamespace(c.Raw.Name, pod.Namespace); err != nil {
		return nil, cniErr(err, types.ErrInvalidNetworkConfig)
	}
	ip, err := p.resolve(c, pod, hc)
	if err != nil {
		return nil, cniErr(err, types.ErrInvalidNetworkConfig)
	}
	pl, err := plan(host, c, ip, ifName, hc)
	if err != nil {
		return nil, cniErr(err, types.ErrInternal)
	}
	return pl, nil
}

// Add creates and configures the egress interface; any failure undoes what was done.
func (p *Plugin) Add(args *skel.CmdArgs) (retErr error) {
	c, pod, hc, err := p.loadWithPrev(args)
	if err != nil {
		return err
	}
	host, err := netlink.NewHandle()
	if err != nil {
		return cniErr(fmt.Errorf("opening netlink: %w", err), types.ErrInternal)
	}
	defer host.Close()
	pl, err := p.planPod(host, c, pod, args.IfName, hc)
	if err != nil {
		return err
	}
	ip := pl.IP
	podNS, podH, err := openPod(args)
	if err != nil {
		return err
	}
	defer podNS.Close()
	defer podH.Close()

	var u undo
	defer func() {
		if retErr != nil {
			u.run()
		}
	}()
	if c.EIP != nil {
		if err := attachEIP(host, c, pl, args, hc, &u); err != nil {
			return cniErr(err, types.ErrInternal)
		}
	}
	fd := int(podNS.Fd())
	link, err := CreateLink(host, podH, fd, pl, &u)
	if err != nil {
		return cniErr(err, types.ErrInternal)
	}
	if err := ConfigureAddrs(podH, link, ip); err != nil {
		return cniErr(err, types.ErrInternal)
	}
	// Before the pod announces its addresses (and routes through them), make sure no
	// other station on the link holds them: a GARP would take their traffic.
	mac := link.Attrs().HardwareAddr
	noARP := link.Attrs().RawFlags&unix.IFF_NOARP != 0 // ipvlan l3/l3s: no ARP to probe with
	if err := podNS.Do(func(ns.NetNS) error {
		if err := ProbeIPv6(link.Attrs().Index, mac, ip.Addresses); err != nil {
			return err
		}
		if noARP {
			return nil
		}
		return ProbeIPv4(link.Attrs().Index, mac, ip.Addresses)
	}); err != nil {
		code := uint(types.ErrInternal)
		if errors.Is(err, ErrAddressInUse) {
			code = types.ErrInvalidNetworkConfig
		}
		return types.NewError(code, "addresses: "+err.Error(), "")
	}
	if err := ConfigureRoutes(podH, link, pl, &u); err != nil {
		return cniErr(err, types.ErrInternal)
	}
	if len(ip.Redirects) > 0 {
		var v4, v6 bool
		for _, r := range ip.Redirects {
			v4, v6 = v4 || r.To.Addr().Is4(), v6 || r.To.Addr().Is6()
		}
		var restore func()
		if err := podNS.Do(func(ns.NetNS) (err error) { restore, err = EnableForwarding(v4, v6); return err }); err != nil {
			return cniErr(err, types.ErrInternal)
		}
		u.push(func() { _ = podNS.Do(func(ns.NetNS) error { restore(); return nil }) })
	}
	if len(ip.Allowed()) > 0 { // redirects included: their targets are allowed
		clusterIf := ""
		if len(ip.Redirects) > 0 {
			if clusterIf, err = ClusterSide(podH); err != nil {
				return cniErr(err, types.ErrInternal)
			}
		}
		u.push(func() { _ = RemoveFilter(fd, args.IfName) })
		if err := InstallFilter(fd, args.IfName, clusterIf, ip); err != nil {
			return cniErr(err, types.ErrInternal)
		}
	}
	if err := podNS.Do(func(ns.NetNS) error { return Announce(link.Attrs().Index, mac, ip.Addresses) }); err != nil {
		return cniErr(err, types.ErrInternal)
	}
	return types.PrintResult(buildResult(c, pl, args, mac), c.Raw.CNIVersion)
}

func buildResult(c *Config, pl *Plan, args *skel.CmdArgs, mac net.HardwareAddr) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if c.Raw.PrevResult != nil {
		if prev, err := current.NewResultFromResult(c.Raw.PrevResult); err == nil {
			res = prev
		}
	}
	idx := len(res.Interfaces)
	res.Interfaces = append(res.Interfaces, &current.Interface{Name: args.IfName, Mac: mac.String(), Sandbox: args.Netns})
	for _, a := range pl.IP.Addresses {
		gw := pl.GW4
		if a.Addr().Is6() {
			gw = pl.GW6
		}
		res.IPs = append(res.IPs, &current.IPConfig{Interface: current.Int(idx), Address: *ipNet(a), Gateway: gw.AsSlice()})
	}
	for _, gw := range []netip.Addr{pl.GW4, pl.GW6} {
		if gw.IsValid() {
			res.Routes = append(res.Routes, &types.Route{Dst: *defaultDst(familyOf(gw)), GW: gw.AsSlice()})
		}
	}
	return res
}

// Del removes the interface, the filter and the plugin's routes, and restores the
// previous default route; for aws-elastic-ip it then releases what ADD did in EC2.
// It succeeds when there is nothing left to remove.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		// DEL must still clean up what it can; a config that no longer parses only
		// matters for what we would do, not for finding our interface.
		fmt.Fprintf(os.Stderr, "egress-router: DEL with an invalid config: %v\n", err)
	}
	podErr := delPod(args)
	if c != nil && c.EIP == nil {
		return cniErr(podErr, types.ErrInternal)
	}
	// The cloud half runs even when the pod's namespace is gone: its record is
	// on the node.
	eipErr := p.releaseEIP(args)
	if eipErr != nil && podErr == nil && args.Netns != "" {
		eipErr = fmt.Errorf("the pod's interface is removed, but %w", eipErr)
	}
	return cniErr(errors.Join(podErr, eipErr), types.ErrInternal)
}

// delPod undoes ADD in the pod's namespace; a namespace that is gone is done.
func delPod(args *skel.CmdArgs) error {
	if args.Netns == "" {
		return nil
	}
	podNS, err := ns.GetNS(args.Netns)
	if err != nil {
		var notExist ns.NSPathNotExistErr
		if errors.As(err, &notExist) {
			return nil // the namespace and everything in it is gone already
		}
		return fmt.Errorf("%w: %w", errNetNS, err)
	}
	defer podNS.Close()
	podH, err := netlink.NewHandleAt(nlns.NsHandle(int(podNS.Fd())))
	if err != nil {
		return fmt.Errorf("opening netlink in the pod: %w", err)
	}
	defer podH.Close()
	return errors.Join(Teardown(podH, args.IfName), RemoveFilter(int(podNS.Fd()), args.IfName))
}

// Check verifies that ADD's work is still in place.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	c, pod, hc, err := p.loadWithPrev(args)
	if err != nil {
		return err
	}
	if c.Raw.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	prev, err := current.NewResultFromResult(c.Raw.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}
	host, err := netlink.NewHandle()
	if err != nil {
		return cniErr(fmt.Errorf("opening netlink: %w", err), types.ErrInternal)
	}
	defer host.Close()
	ip, err := p.resolve(c, pod, hc)
	known := err == nil
	var gws []netip.Addr
	if errors.Is(err, errAPIUnavailable) {
		// CHECK answers for the pod's plumbing, which an API server that is down says
		// nothing about: check it against what ADD reported instead.
		fmt.Fprintf(os.Stderr, "egress-router: CHECK without the ipConfig ConfigMap (%v); checking %s against prevResult\n", err, args.IfName)
		if ip, gws, err = fromResult(prev, args.IfName); err != nil {
			return types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
		}
	} else if err != nil {
		return cniErr(err, types.ErrInvalidNetworkConfig)
	}
	pl, err := plan(host, c, ip, args.IfName, hc, gws...)
	if err != nil {
		return cniErr(err, types.ErrInternal)
	}
	podNS, podH, err := openPod(args)
	if err != nil {
		return err
	}
	defer podNS.Close()
	defer podH.Close()
	if err := verify(podH, int(podNS.Fd()), pl, prev, args, known); err != nil {
		return cniErr(err, types.ErrInternal)
	}
	if c.EIP != nil {
		return cniErr(checkEIP(pl, args, hc), types.ErrInternal)
	}
	return nil
}

// fromResult reads the addresses and gateways ADD reported for ifName.
func fromResult(prev *current.Result, ifName string) (IPSettings, []netip.Addr, error) {
	idx := slices.IndexFunc(prev.Interfaces, func(i *current.Interface) bool { return i.Name == ifName })
	if idx < 0 {
		return IPSettings{}, nil, fmt.Errorf("no interface %s", ifName)
	}
	var s IPSettings
	var gws []netip.Addr
	for _, c := range prev.IPs {
		if c.Interface == nil || *c.Interface != idx {
			continue
		}
		p, ok := prefixFromIPNet(&c.Address)
		if !ok {
			return IPSettings{}, nil, fmt.Errorf("address %v of %s", c.Address, ifName)
		}
		s.Addresses = append(s.Addresses, p)
		if gw, ok := netip.AddrFromSlice(c.Gateway); ok {
			gws = append(gws, gw.Unmap())
		}
	}
	if len(s.Addresses) == 0 {
		return IPSettings{}, nil, fmt.Errorf("no addresses of %s", ifName)
	}
	return s, gws, nil
}

// verify checks ADD's work against the plan; knownDests is false when the plan's
// destinations are unknown (the ConfigMap could not be read).
func verify(pod *netlink.Handle, fd int, pl *Plan, prev *current.Result, args *skel.CmdArgs, knownDests bool) error {
	if !slices.ContainsFunc(prev.Interfaces, func(i *current.Interface) bool { return i.Name == args.IfName }) {
		return fmt.Errorf("prevResult has no interface %s", args.IfName)
	}
	link, err := pod.LinkByName(args.IfName)
	if err != nil {
		return fmt.Errorf("interface %s is missing from the pod: %w", args.IfName, err)
	}
	if link.Type() != pl.Type {
		return fmt.Errorf("interface %s is a %s, not a %s", args.IfName, link.Type(), pl.Type)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return pod.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("listing addresses of %s: %w", args.IfName, err)
	}
	for _, want := range pl.IP.Addresses {
		if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { p, ok := prefixFromIPNet(a.IPNet); return ok && p == want }) {
			return fmt.Errorf("address %s is missing from %s", want, args.IfName)
		}
		if !slices.ContainsFunc(prev.IPs, func(c *current.IPConfig) bool { p, ok := prefixFromIPNet(&c.Address); return ok && p == want }) {
			return fmt.Errorf("address %s is not in prevResult", want)
		}
	}
	for _, gw := range []netip.Addr{pl.GW4, pl.GW6} {
		if !gw.IsValid() {
			continue
		}
		routes, err := retryDump(func() ([]netlink.Route, error) { return pod.RouteList(nil, familyOf(gw)) })
		if err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}
		var defaults int
		found := false
		for _, r := range routes {
			if !isDefault(r) {
				continue
			}
			defaults++
			if r.LinkIndex == link.Attrs().Index && r.Gw.Equal(gw.AsSlice()) {
				found = true
			}
		}
		if !found || defaults != 1 {
			return fmt.Errorf("the pod's default route is not (only) via %s on %s", gw, args.IfName)
		}
		for _, k := range pl.Keep {
			if familyOf(k.Addr()) != familyOf(gw) {
				continue
			}
			if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
				p, ok := prefixFromIPNet(r.Dst)
				return ok && p == k && r.LinkIndex != link.Attrs().Index
			}) {
				return fmt.Errorf("the route to %s via the pod network is missing", k)
			}
		}
	}
	saved, err := SavedRoutes(pod)
	if err != nil {
		return err
	}
	for _, b := range saved {
		if isDefault(b) {
			continue
		}
		routes, err := retryDump(func() ([]netlink.Route, error) { return pod.RouteList(nil, b.Family) })
		if err != nil {
			return fmt.Errorf("listing routes: %w", err)
		}
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
			return r.LinkIndex == b.LinkIndex && r.Gw.Equal(b.Gw) && r.Dst.String() == b.Dst.String()
		}) {
			return fmt.Errorf("the pod network's route to %s (present before ADD, kept through the previous default interface) is gone", b.Dst)
		}
	}
	got, err := TableRuleCounts(fd, args.IfName)
	if err != nil {
		return err
	}
	if !knownDests {
		// The ConfigMap could not be read: the table can only be checked for being whole.
		// With redirects (a prerouting chain) forward also holds the inbound rules.
		extra := 0
		if got["prerouting"] > 0 {
			extra = len(inboundRules(args.IfName))
		}
		if got != nil && got["output"]+extra != got["forward"] {
			return fmt.Errorf("the destinations filter (nftables table inet %s) is damaged: chain output has %d rules, forward %d", FilterTable(args.IfName), got["output"], got["forward"])
		}
		return nil
	}
	clusterIf := ""
	if len(pl.IP.Redirects) > 0 {
		if clusterIf, err = ClusterSide(pod); err != nil {
			return err
		}
	}
	want := map[string]int{}
	for chain, rules := range TableRules(args.IfName, clusterIf, pl.IP) {
		want[chain] = len(rules)
	}
	if len(want) == 0 {
		want = nil
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("nftables table inet %s has rules per chain %v, want %v", FilterTable(args.IfName), got, want)
	}
	return nil
}

// Status reports whether the plugin can serve ADD with this configuration: the
// configuration, the node's settings file (readable and valid), what those settings
// decide about it, and the node's kubeconfig when ipConfig needs one.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		return cniErr(err, types.ErrDecodingFailure)
	}
	hc, err := p.hostConfig()
	if err != nil {
		return err
	}
	if err := refuseEIP(c, hc, types.ErrPluginNotAvailable); err != nil {
		return err
	}
	if c.EIP != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ec2Timeout)
		defer cancel()
		if _, err := newEC2EIP(ctx); err != nil {
			return cniErr(err, types.ErrPluginNotAvailable)
		}
	}
	if err := refusePassthru(c, hc, types.ErrPluginNotAvailable); err != nil {
		return err
	}
	if c.Master != "" {
		if _, err := netlink.LinkByName(c.Master); err != nil {
			return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("interfaceArgs.master: host interface %q does not exist", c.Master), "")
		}
	}
	if c.IPConfig != nil {
		if _, err := loadKubeconfig(hc.Kubeconfig); err != nil {
			return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
		}
	}
	return nil
}

// GC has nothing to collect: every object the plugin makes lives in the pod's network
// namespace and goes with it. It still validates the configuration.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	if _, err := ParseConfig(args.StdinData); err != nil {
		return cniErr(err, types.ErrDecodingFailure)
	}
	return nil
}
