package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/control/assign"
	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// Reasons of the Events about cloud attachment.
const (
	// ReasonCloudAttachFailed (Warning, on the EgressIP and the
	// CloudPrivateIPConfig): the cloud refused to attach an egress IP to
	// its node's interface; the IP stays out of status, so no gateway
	// claims it, and the attach is retried with backoff.
	ReasonCloudAttachFailed = "CloudAttachFailed"
	// ReasonCloudDetachFailed (Warning, on the CloudPrivateIPConfig): a
	// released egress IP could not be detached; retried with backoff.
	ReasonCloudDetachFailed = "CloudDetachFailed"
)

// nodeAnnotator is a source that can patch Node annotations
// (cluster.Kube): with it the controller publishes the egress-ipconfig of
// the clouds that implement cloud.NodeConfigs.
type nodeAnnotator interface {
	AnnotateNode(ctx context.Context, node string, set map[string]*string) error
}

// cloudTarget is where the last assignment placed an egress IP.
type cloudTarget struct {
	node   string
	object string // the EgressIP
}

// cloudAttach attaches egress IPs through a cloud provider before any
// gateway may claim them, and detaches them after they are released. Its
// state is the CloudPrivateIPConfig objects, one per IP; its own
// rate-limited queue, keyed by IP, retries failures with backoff.
type cloudAttach struct {
	p     cloud.Provider
	store cluster.CloudIPs
	queue workqueue.TypedRateLimitingInterface[netip.Addr]

	// nodesChanged wakes publishNodes (capacity 1: one wake-up covers
	// any number of changes).
	nodesChanged chan struct{}

	mu     sync.Mutex
	state  map[netip.Addr]cluster.CloudIP // as stored
	target map[netip.Addr]cloudTarget     // from the last assignment
}

// SetCloud makes the controller attach every egress IP through p, with
// per-IP state in store, before a status places it on a node, and detach
// it once no status does; call it before Run.
func (c *Controller) SetCloud(p cloud.Provider, store cluster.CloudIPs) {
	c.cloud = &cloudAttach{
		p:     p,
		store: store,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[netip.Addr](),
			workqueue.TypedRateLimitingQueueConfig[netip.Addr]{Name: "cloudip"}),
		state:        map[netip.Addr]cluster.CloudIP{},
		target:       map[netip.Addr]cloudTarget{},
		nodesChanged: make(chan struct{}, 1),
	}
}

// startCloud reads the stored attachments, before the first assignment,
// and runs the attach worker until ctx ends.
func (c *Controller) startCloud(ctx context.Context) error {
	a := c.cloud
	if a == nil {
		return nil
	}
	l, err := a.store.ListCloudIPs(ctx)
	if err != nil && l == nil {
		return err
	}
	if err != nil {
		c.log.Warn("some CloudPrivateIPConfig objects are ignored", "err", err)
	}
	a.mu.Lock()
	for _, ci := range l {
		a.state[ci.IP] = ci
		a.queue.Add(ci.IP) // detached if no assignment wants it
	}
	a.mu.Unlock()
	context.AfterFunc(ctx, a.queue.ShutDown)
	if nc, ok := a.p.(cloud.NodeConfigs); ok {
		if an, ok := c.src.(nodeAnnotator); ok {
			go c.publishNodes(ctx, nc, an.AnnotateNode)
		} else {
			c.log.Warn("this cloud's node egress-ipconfig is published by the controller only with the Kubernetes source; write it into the node files", "annotation", cluster.AnnotationEgressIPConfig)
		}
	}
	go func() {
		for c.processCloud(ctx) {
		}
	}()
	return nil
}

// cloudPlaced takes the placement of the last assignment ("object/ip" →
// node) and queues every IP whose attachment may have to change.
func (c *Controller) cloudPlaced(placed map[string]string) {
	a := c.cloud
	if a == nil {
		return
	}
	target := make(map[netip.Addr]cloudTarget, len(placed))
	for k, node := range placed {
		obj, s, _ := strings.Cut(k, "/")
		if ip, err := netip.ParseAddr(s); err == nil {
			target[ip.Unmap()] = cloudTarget{node: node, object: obj}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.target = target
	for ip := range target {
		a.queue.Add(ip)
	}
	for ip := range a.state {
		a.queue.Add(ip)
	}
}

// cloudReady keeps the status items whose IP the cloud shows on their
// node: a gateway claims what status gives it, so status never names an
// IP the cloud does not route to that node.
func (c *Controller) cloudReady(items []egressv1.EgressIPStatusItem) []egressv1.EgressIPStatusItem {
	a := c.cloud
	if a == nil {
		return items
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []egressv1.EgressIPStatusItem
	for _, it := range items {
		ip, err := netip.ParseAddr(it.EgressIP)
		if err == nil && a.state[ip.Unmap()].Attached(it.Node) {
			out = append(out, it)
		}
	}
	return out
}

// placedByObject is the last assignment's placements by object, in cloud
// mode only (nil otherwise): those the assignment made but cloudReady kept
// out of status while their attach is pending go back into its input
// (withPending), so the assignment keeps them where they are being attached
// (and a failed owner's IP on the standby it went to) instead of placing
// them anew on every cycle.
func (c *Controller) placedByObject() map[string][]assign.StatusItem {
	if c.cloud == nil {
		return nil
	}
	out := make(map[string][]assign.StatusItem)
	for k, node := range c.mem.placed {
		if name, ip, ok := strings.Cut(k, "/"); ok {
			out[name] = append(out[name], assign.StatusItem{Node: node, EgressIP: ip})
		}
	}
	return out
}

// withPending adds to an object's stored status items the placements of
// placed whose IP it lacks.
func withPending(items, placed []assign.StatusItem) []assign.StatusItem {
	out := items
	for _, p := range placed {
		if !slices.ContainsFunc(items, func(it assign.StatusItem) bool { return it.EgressIP == p.EgressIP }) {
			if len(out) == len(items) {
				out = slices.Clone(items)
			}
			out = append(out, p)
		}
	}
	return out
}

func (c *Controller) processCloud(ctx context.Context) bool {
	a := c.cloud
	ip, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(ip)
	if c.reconcileCloud(ctx, ip) {
		a.queue.Forget(ip)
	} else {
		a.queue.AddRateLimited(ip)
	}
	return true
}

// reconcileCloud moves ip's attachment towards the last assignment; false
// means try again after a backoff.
func (c *Controller) reconcileCloud(ctx context.Context, ip netip.Addr) bool {
	a := c.cloud
	a.mu.Lock()
	t, want := a.target[ip]
	st, have := a.state[ip]
	a.mu.Unlock()
	if !have {
		st = cluster.CloudIP{IP: ip}
	}
	if want {
		if st.Attached(t.node) && st.SpecNode == t.node {
			c.queue.Add(qkey{name: t.object}) // the status may wait for it
			return true
		}
		return c.attach(ctx, st, t)
	}
	if !have {
		return true
	}
	// Detach after release: only once no stored status names the IP on
	// the node that holds it (the status write that drops it triggers a
	// new assignment, which queues the IP again).
	for _, e := range c.src.View().EgressIPs {
		for _, it := range e.Status.Items {
			if a, err := netip.ParseAddr(it.EgressIP); err == nil && a.Unmap() == ip && it.Node == st.StatusNode {
				return true
			}
		}
	}
	return c.detach(ctx, st)
}

func (c *Controller) attach(ctx context.Context, st cluster.CloudIP, t cloudTarget) bool {
	a := c.cloud
	st.SpecNode = t.node
	iface, err := c.cloudInterface(t.node)
	if err == nil {
		// Where the cloud has it now, for the clouds that cannot move an
		// address in one call; unknown when that node is gone.
		var from cloud.NIC
		if st.StatusNode != "" && st.StatusNode != t.node {
			from, _ = c.cloudInterface(st.StatusNode)
		}
		err = a.p.Attach(ctx, iface, st.IP, from)
	}
	ok := err == nil
	switch {
	case ok:
		st.StatusNode = t.node
		setAssigned(&st, metav1.ConditionTrue, cluster.ReasonCloudResponseSuccess,
			fmt.Sprintf("attached to %s of node %s", iface.ID, t.node))
		c.log.Info("egress IP attached by the cloud", "ip", st.IP, "node", t.node, "interface", iface.ID)
	case errors.Is(err, cloud.ErrPending):
		setAssigned(&st, metav1.ConditionUnknown, cluster.ReasonCloudResponsePending, err.Error())
		c.log.Info("egress IP attach pending", "ip", st.IP, "node", t.node, "err", err)
	default:
		msg := fmt.Sprintf("egress IP %s could not be attached to node %s: %v; it is not in status (no gateway claims it) until the cloud has it; retrying with backoff", st.IP, t.node, err)
		setAssigned(&st, metav1.ConditionFalse, cluster.ReasonCloudResponseError, msg)
		c.log.Warn("cloud attach failed", "ip", st.IP, "node", t.node, "err", err)
		if e, found := c.src.EgressIP(t.object); found {
			c.src.Event(&corev1.ObjectReference{APIVersion: egressv1.SchemeGroupVersion.String(), Kind: egressv1.Kind,
				Name: e.Name, UID: e.UID}, corev1.EventTypeWarning, ReasonCloudAttachFailed, msg)
		}
		c.src.Event(cloudIPRef(st.IP), corev1.EventTypeWarning, ReasonCloudAttachFailed, msg)
	}
	if err := c.storeCloud(ctx, st); err != nil {
		return false
	}
	if ok {
		c.queue.Add(qkey{name: t.object})
	}
	return ok
}

func (c *Controller) detach(ctx context.Context, st cluster.CloudIP) bool {
	a := c.cloud
	iface, err := c.cloudInterface(st.StatusNode)
	switch {
	case st.StatusNode == "":
		err = nil // never attached
	case err != nil && !c.nodeExists(st.StatusNode):
		// The node is gone, and with it the instance's interface.
		c.log.Info("node of a released egress IP is gone; forgetting its attachment", "ip", st.IP, "node", st.StatusNode)
		err = nil
	case err == nil:
		err = a.p.Detach(ctx, iface, st.IP)
	}
	if err != nil {
		msg := fmt.Sprintf("released egress IP %s could not be detached from node %s: %v; retrying with backoff", st.IP, st.StatusNode, err)
		c.log.Warn("cloud detach failed", "ip", st.IP, "node", st.StatusNode, "err", err)
		c.src.Event(cloudIPRef(st.IP), corev1.EventTypeWarning, ReasonCloudDetachFailed, msg)
		st.SpecNode = ""
		setAssigned(&st, metav1.ConditionFalse, cluster.ReasonCloudResponseError, msg)
		c.storeCloud(ctx, st)
		return false
	}
	if err := a.store.DeleteCloudIP(ctx, st.IP); err != nil {
		c.log.Warn("deleting a CloudPrivateIPConfig failed", "ip", st.IP, "err", err)
		return false
	}
	c.log.Info("egress IP detached", "ip", st.IP, "node", st.StatusNode)
	a.mu.Lock()
	delete(a.state, st.IP)
	a.mu.Unlock()
	return true
}

func (c *Controller) storeCloud(ctx context.Context, st cluster.CloudIP) error {
	a := c.cloud
	if err := a.store.StoreCloudIP(ctx, st); err != nil {
		c.log.Warn("storing a CloudPrivateIPConfig failed", "ip", st.IP, "err", err)
		return err
	}
	a.mu.Lock()
	a.state[st.IP] = st
	a.mu.Unlock()
	return nil
}

// cloudInterface is the cloud interface of node, from its
// cloud.network.openshift.io/egress-ipconfig annotation and its
// spec.providerID.
func (c *Controller) cloudInterface(node string) (cloud.NIC, error) {
	for _, n := range c.src.View().Nodes {
		if n.Name != node {
			continue
		}
		s, ok := n.Annotations[cluster.AnnotationEgressIPConfig]
		if !ok {
			return cloud.NIC{}, fmt.Errorf("node %s has no %s annotation naming its cloud interface (the gateway agent or OpenShift's cloud network config controller publishes it)", node, cluster.AnnotationEgressIPConfig)
		}
		cfg, err := cluster.ParseEgressIPConfig(s)
		if err != nil {
			return cloud.NIC{}, err
		}
		return cloud.NIC{ID: cfg.Interface, Instance: n.Spec.ProviderID}, nil
	}
	return cloud.NIC{}, fmt.Errorf("node %s is not in the cluster", node)
}

func (c *Controller) nodeExists(node string) bool {
	for _, n := range c.src.View().Nodes {
		if n.Name == node {
			return true
		}
	}
	return false
}

func setAssigned(st *cluster.CloudIP, status metav1.ConditionStatus, reason, msg string) {
	st.Conditions = append([]metav1.Condition(nil), st.Conditions...) // never share the stored slice
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: cluster.ConditionAssigned, Status: status, Reason: reason, Message: msg})
}

func cloudIPRef(ip netip.Addr) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: cluster.CloudPrivateIPConfigGVR.GroupVersion().String(),
		Kind: cluster.CloudPrivateIPConfigKind, Name: cluster.CloudIPName(ip)}
}
