package gwagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Defaults of Facts.
const (
	// DefaultFactsDebounce gathers a burst of address and link changes
	// (an interface coming up with its addresses, DHCP renewing several)
	// into one look and at most one patch.
	DefaultFactsDebounce = 250 * time.Millisecond
	// DefaultFactsResync re-reads the interfaces without a netlink event,
	// in case a notification was lost (the socket's buffer overran).
	DefaultFactsResync = time.Minute
)

// Facts publishes this gateway node's interface subnets on its Node
// object (cluster.AnnotationEgretPrimaryIfAddr and AnnotationEgretHostCIDRs),
// which the controller needs to place egress IPs, on clusters where
// OVN-Kubernetes does not publish its own: while either of its annotations
// is on the Node, Facts writes nothing. It watches the served interfaces'
// addresses and links (netlink) and patches only when the values change.
//
// Only the served interfaces count, because the data plane can host an
// egress IP only on an interface it serves; addresses with a full-length
// prefix (the claimed egress IPs themselves, /32 and /128) and link-local
// ones are left out.
type Facts struct {
	// Node is this node's name.
	Node string
	// Interfaces returns the served interfaces, in configuration order:
	// the first with an address of a family gives that family's primary.
	Interfaces func() []string
	// Source supplies the cached Node, to compare before patching.
	Source cluster.Source
	// Annotate merge-patches the Node's annotations (nil value: remove the
	// key); cluster.Kube.AnnotateNode.
	Annotate func(ctx context.Context, node string, set map[string]*string) error
	// NS is the network namespace of the interfaces; closed (netns.None())
	// or left zero for the agent's own. (A zero NsHandle is fd 0, which
	// IsOpen takes for a namespace: setns on it needs CAP_SYS_ADMIN, which
	// the gateway's container does not have.)
	NS netns.NsHandle
	// Cloud, when set (the node is a cloud instance), also publishes the
	// node's cloud.network.openshift.io/egress-ipconfig: the primary
	// interface, its subnets, and the capacity left (the instance type's
	// limit minus the addresses in use that are not egress IPs), unless
	// another component owns that annotation (it is there without
	// cluster.AnnotationEgretCloudPublisher).
	Cloud cloud.Provider
	// Debounce and Resync default to DefaultFactsDebounce and DefaultFactsResync.
	Debounce, Resync time.Duration
	Log              *slog.Logger

	kick chan struct{}
}

// NodeChanged asks for a look at the Node: someone may have removed or
// changed the annotations, or OVN-Kubernetes may have taken them over.
// Safe to call before Run and from any goroutine.
func (f *Facts) NodeChanged() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// NewFacts returns Facts ready for Run with the defaults filled in.
func NewFacts(f Facts) *Facts {
	if f.Debounce <= 0 {
		f.Debounce = DefaultFactsDebounce
	}
	if f.Resync <= 0 {
		f.Resync = DefaultFactsResync
	}
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	if f.NS == 0 {
		f.NS = netns.None()
	}
	f.kick = make(chan struct{}, 1)
	return &f
}

// Run publishes until ctx ends. The first look waits for the first
// NodeChanged (the informer's add of this Node once the cache syncs). A
// failed patch is retried with back-off; Run returns an error only when
// netlink cannot be opened at all.
func (f *Facts) Run(ctx context.Context) error {
	h, err := f.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	events := make(chan struct{}, 1)
	subscribe := func() (func(), error) {
		done := make(chan struct{})
		addrs := make(chan netlink.AddrUpdate, 64)
		links := make(chan netlink.LinkUpdate, 64)
		var ns *netns.NsHandle
		if f.NS.IsOpen() {
			ns = &f.NS
		}
		onErr := func(err error) {
			f.Log.Warn("gateway agent: interface watch failed; re-reading interfaces", "err", err)
		}
		if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
			close(done)
			return nil, fmt.Errorf("watching interface addresses: %w", err)
		}
		if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
			close(done)
			return nil, fmt.Errorf("watching interfaces: %w", err)
		}
		forward := func() {
			select {
			case events <- struct{}{}:
			default:
			}
		}
		go func() {
			for {
				select {
				case _, ok := <-addrs:
					if !ok {
						addrs = nil
					}
					forward()
				case _, ok := <-links:
					if !ok {
						links = nil
					}
					forward()
				case <-done:
					return
				}
				if addrs == nil && links == nil {
					return
				}
			}
		}()
		return func() { close(done) }, nil
	}
	stop, err := subscribe()
	if err != nil {
		return err
	}
	defer func() { stop() }()

	resync := time.NewTicker(f.Resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	var retry <-chan time.Time
	// 1 s, 2 s, 4 s ... up to a minute between tries; a success starts over.
	fresh := wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt}
	backoff := fresh
	var st pubState
	look := func() {
		err := f.publish(ctx, h, &st)
		retry = nil
		if err != nil && ctx.Err() == nil {
			in := backoff.Step()
			retry = time.After(in)
			f.Log.Warn("gateway agent: publishing the node's interface subnets failed; retrying", "err", err, "in", in)
			return
		}
		backoff = fresh
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
			if debounce == nil {
				debounce = time.After(f.Debounce)
			}
			continue
		case <-f.kick:
		case <-debounce:
		case <-resync.C:
			// A lost notification or a closed subscription: start over.
			stop()
			if stop, err = subscribe(); err != nil {
				f.Log.Warn("gateway agent: interface watch", "err", err)
				stop = func() {}
			}
		case <-retry:
		}
		debounce = nil
		look()
	}
}

func (f *Facts) handle() (*netlink.Handle, error) {
	var h *netlink.Handle
	var err error
	if f.NS.IsOpen() {
		h, err = netlink.NewHandleAt(f.NS)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	return h, nil
}

// pubState is what publish remembers between looks.
type pubState struct {
	logged string             // the state last logged, so a steady state logs once
	rv     string             // the Node's resourceVersion when sent was patched
	sent   map[string]*string // the last patch
}

// publish reads the interfaces and patches the Node if its annotations
// differ, unless the same patch was sent already and the cache has not
// seen the Node change since (the informer lags the patch).
func (f *Facts) publish(ctx context.Context, h *netlink.Handle, st *pubState) error {
	var node *corev1.Node
	for _, n := range f.Source.View().Nodes {
		if n.Name == f.Node {
			node = n
		}
	}
	if node == nil {
		return fmt.Errorf("node %s is not in the cache (is --node this node's name?)", f.Node)
	}
	want := map[string]*string{}
	cloudState, err := f.cloudFacts(ctx, node, want)
	if err != nil {
		return err
	}
	if cluster.OVNPublishesInterfaces(node.Annotations) {
		if st.logged != "ovn" {
			f.Log.Info("gateway agent: OVN-Kubernetes publishes this node's interface subnets; not writing Egret's", "node", f.Node)
			st.logged = "ovn"
		}
		if len(want) == 0 {
			return nil
		}
	}
	var primary cluster.IfAddr
	var host []netip.Prefix
	if !cluster.OVNPublishesInterfaces(node.Annotations) {
		if primary, host, err = readInterfaces(h, f.Interfaces(), internalIPs(node)); err != nil {
			return err
		}
		want[cluster.AnnotationEgretPrimaryIfAddr], want[cluster.AnnotationEgretHostCIDRs] = nil, nil
		if len(host) > 0 {
			p, c := cluster.FormatPrimaryIfAddr(primary), cluster.FormatHostCIDRs(host)
			want[cluster.AnnotationEgretPrimaryIfAddr], want[cluster.AnnotationEgretHostCIDRs] = &p, &c
		}
	}
	patch := map[string]*string{}
	for k, v := range want {
		cur, ok := node.Annotations[k]
		if (v == nil && ok) || (v != nil && (!ok || cur != *v)) {
			patch[k] = v
		}
	}
	state := fmt.Sprint(primary, host, cloudState)
	if len(patch) == 0 || (node.ResourceVersion == st.rv && maps.EqualFunc(patch, st.sent, eqPtr)) {
		st.logged = state
		return nil
	}
	if err := f.Annotate(ctx, f.Node, patch); err != nil {
		return err
	}
	st.rv, st.sent = node.ResourceVersion, patch
	switch {
	case cluster.OVNPublishesInterfaces(node.Annotations):
	case len(host) == 0:
		f.Log.Warn("gateway agent: no served interface has an address; removed the node's interface subnets, so it hosts no egress IP", "node", f.Node, "interfaces", f.Interfaces())
	default:
		f.Log.Info("gateway agent: published the node's interface subnets", "node", f.Node, "primary", cluster.FormatPrimaryIfAddr(primary), "hostCIDRs", cluster.FormatHostCIDRs(host))
	}
	if cloudState != "" {
		f.Log.Info("gateway agent: published the node's cloud interface and capacity", "node", f.Node, cluster.AnnotationEgressIPConfig, cloudState)
	}
	st.logged = state
	return nil
}

// cloudFacts adds the node's egress-ipconfig to want, unless Cloud is
// unset or another component owns the annotation; it returns the value.
func (f *Facts) cloudFacts(ctx context.Context, node *corev1.Node, want map[string]*string) (string, error) {
	if f.Cloud == nil {
		return "", nil
	}
	_, has := node.Annotations[cluster.AnnotationEgressIPConfig]
	if has && node.Annotations[cluster.AnnotationEgretCloudPublisher] != publisherValue {
		return "", nil // another component's (OpenShift's cloud network config controller)
	}
	l, err := f.Cloud.Local(ctx)
	if err != nil {
		return "", fmt.Errorf("reading this instance's cloud interface: %w", err)
	}
	// Egress IPs the cloud attached here count against nothing: the
	// controller already counts the ones it assigns against the capacity.
	egress := map[netip.Addr]bool{}
	for _, e := range f.Source.View().EgressIPs {
		for _, s := range e.Spec.EgressIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				egress[ip.Unmap()] = true
			}
		}
	}
	capa := l.Limit
	for _, ip := range l.InUse {
		switch {
		case egress[ip.Unmap()]:
		case capa.Total:
			capa.IP--
		case ip.Unmap().Is4():
			capa.IPv4--
		default:
			capa.IPv6--
		}
	}
	capa.IP, capa.IPv4, capa.IPv6 = max(capa.IP, 0), max(capa.IPv4, 0), max(capa.IPv6, 0)
	v := cluster.FormatEgressIPConfig(cluster.CloudConfig{Interface: l.Interface, IfAddr: l.Subnets, Capacity: capa})
	pub := publisherValue
	want[cluster.AnnotationEgressIPConfig], want[cluster.AnnotationEgretCloudPublisher] = &v, &pub
	return v, nil
}

// publisherValue is the gateway agent's cluster.AnnotationEgretCloudPublisher.
const publisherValue = "egret-gateway"

func eqPtr(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func internalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// readInterfaces returns the subnets of the named interfaces: host holds
// every address with its mask (sorted), primary per family the one that
// is an InternalIP of the node, else the first of the first interface
// that has one. A missing interface is skipped: the data plane serves it
// once it appears (a second NIC added later), and the link watch then
// publishes its subnets.
func readInterfaces(h *netlink.Handle, names []string, internal []netip.Addr) (cluster.IfAddr, []netip.Prefix, error) {
	var primary cluster.IfAddr
	var host []netip.Prefix
	var errs []error
	for _, name := range names {
		l, err := h.LinkByName(name)
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("served interface %s: %w", name, err))
			continue
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			errs = append(errs, fmt.Errorf("addresses of %s: %w", name, err))
			continue
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || a.IPNet == nil {
				continue
			}
			ip = ip.Unmap()
			bits, _ := a.Mask.Size()
			if !ip.IsGlobalUnicast() || bits >= ip.BitLen() {
				continue // link-local, or a claimed egress IP (a host prefix has no subnet)
			}
			p := netip.PrefixFrom(ip, bits)
			host = append(host, p)
			slot := &primary.IPv4
			if ip.Is6() {
				slot = &primary.IPv6
			}
			if !slot.IsValid() || (slices.Contains(internal, ip) && !slices.Contains(internal, slot.Addr())) {
				*slot = p
			}
		}
	}
	slices.SortFunc(host, func(x, y netip.Prefix) int {
		return cmp.Or(x.Addr().Compare(y.Addr()), cmp.Compare(x.Bits(), y.Bits()))
	})
	host = slices.Compact(host)
	return primary, host, errors.Join(errs...)
}
