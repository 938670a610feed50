package controller

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/egret-gw/egret/control/cloud"
	"github.com/egret-gw/egret/control/cluster"
	corev1 "k8s.io/api/core/v1"
)

// controllerPublisher is the controller's
// cluster.AnnotationEgretCloudPublisher value.
const controllerPublisher = "egret-controller"

// cloudNodesResync is how often the nodes' egress-ipconfig is read again
// without a Node change: pairs others add to a port show within it.
const cloudNodesResync = time.Minute

// publishNodes writes the egress-ipconfig of every egress-assignable node
// of a cloud whose nodes' configuration the controller reads (OpenStack),
// on each Node change and every cloudNodesResync, until ctx ends. A Node
// that has the annotation without Egret's publisher marker belongs to
// another component (OpenShift's cloud network config controller) and is
// left alone, as the gateway agents do on the other clouds.
func (c *Controller) publishNodes(ctx context.Context, nc cloud.NodeConfigs, annotate func(context.Context, string, map[string]*string) error) {
	t := time.NewTicker(cloudNodesResync)
	defer t.Stop()
	failed := map[string]string{} // node → last error logged, to log each once
	for {
		c.publishNodesOnce(ctx, nc, annotate, failed)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.cloud.nodesChanged:
		}
	}
}

func (c *Controller) publishNodesOnce(ctx context.Context, nc cloud.NodeConfigs, annotate func(context.Context, string, map[string]*string) error, failed map[string]string) {
	view := c.src.View()
	egress := map[netip.Addr]bool{}
	for _, e := range view.EgressIPs {
		for _, s := range e.Spec.EgressIPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				egress[ip.Unmap()] = true
			}
		}
	}
	isEgress := func(a netip.Addr) bool { return egress[a] }
	for _, n := range view.Nodes {
		if _, ok := n.Labels[cluster.LabelEgressAssignable]; !ok || !strings.HasPrefix(n.Spec.ProviderID, "openstack://") {
			continue
		}
		cur, has := n.Annotations[cluster.AnnotationEgressIPConfig]
		if has && n.Annotations[cluster.AnnotationEgretCloudPublisher] != controllerPublisher {
			continue
		}
		cfg, err := nc.NodeConfig(ctx, n.Spec.ProviderID, internalAddrs(n), isEgress)
		if err != nil {
			if ctx.Err() == nil && failed[n.Name] != err.Error() {
				c.log.Warn("reading a node's cloud interface failed; its egress-ipconfig is not published, so it hosts no egress IP until this succeeds", "node", n.Name, "err", err)
				failed[n.Name] = err.Error()
			}
			continue
		}
		delete(failed, n.Name)
		v := cluster.FormatEgressIPConfig(cfg)
		if has && v == cur {
			continue
		}
		pub := controllerPublisher
		if err := annotate(ctx, n.Name, map[string]*string{cluster.AnnotationEgressIPConfig: &v, cluster.AnnotationEgretCloudPublisher: &pub}); err != nil {
			c.log.Warn("publishing a node's egress-ipconfig failed", "node", n.Name, "err", err)
			continue
		}
		c.log.Info("published the node's cloud interface and capacity", "node", n.Name, cluster.AnnotationEgressIPConfig, v)
	}
}

func internalAddrs(n *corev1.Node) []netip.Addr {
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
