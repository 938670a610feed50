package steer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Where Cilium keeps its agents' configuration, and the keys of it that
// decide eBPF host routing (Cilium's pkg/option names).
const (
	// CiliumConfigNamespace and CiliumConfigName name the ConfigMap the
	// agent reads at start; deploy/steer/rbac.yaml grants get on it alone.
	CiliumConfigNamespace = "kube-system"
	CiliumConfigName      = "cilium-config"

	ciliumLegacyRouting = "enable-host-legacy-routing"
	ciliumKPR           = "kube-proxy-replacement"
	ciliumBPFMasq       = "enable-bpf-masquerade"
	ciliumIPv4          = "enable-ipv4"
	ciliumIPv6          = "enable-ipv6"
	ciliumIPv4Masq      = "enable-ipv4-masquerade"
	ciliumIPv6Masq      = "enable-ipv6-masquerade"
)

// CiliumHostRouting reports whether the cilium-config data means eBPF host
// routing, and if so why, naming the keys. Under it Cilium's BPF programs
// redirect pod packets to the node's NIC past the host's routing and
// netfilter: the steer agent's ip rules, its fail-closed filter and its
// null SNAT never see them, and selected pods leave as the node.
//
// The rule is Cilium's own (daemon/cmd, finishKubeProxyReplacementInit):
// host routing is BPF unless enable-host-legacy-routing is true, and Cilium
// falls back to legacy routing when masquerading is done by iptables (on
// for a family without enable-bpf-masquerade) or kube-proxy-replacement is
// not true. Keys absent take the agent's defaults: legacy routing off,
// kube-proxy replacement off, BPF masquerading off, IPv4 and both
// masquerades on. An absent enable-ipv6 counts as off, which can only
// refuse more. Values read as Cilium reads them (strconv.ParseBool;
// unreadable is false). Fallbacks Cilium decides at run time or in older
// releases (a kernel without bpf_redirect_neigh/peer, IPsec, WireGuard,
// endpoint routes before 1.14, a BPF masquerade that failed to load) are
// not credited: the fix, enable-host-legacy-routing: "true", is what Cilium
// does then anyway.
func CiliumHostRouting(data map[string]string) (why string, bpf bool) {
	flag := func(key string, def bool) bool {
		v, ok := data[key]
		if !ok {
			return def
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		return err == nil && b
	}
	if flag(ciliumLegacyRouting, false) {
		return "", false
	}
	kpr := strings.TrimSpace(data[ciliumKPR])
	// "strict" is what Cilium 1.14 and earlier called "true".
	if kpr != "true" && kpr != "strict" {
		return "", false
	}
	iptMasq4 := flag(ciliumIPv4, true) && flag(ciliumIPv4Masq, true)
	iptMasq6 := flag(ciliumIPv6, false) && flag(ciliumIPv6Masq, true)
	bpfMasq := flag(ciliumBPFMasq, false)
	if (iptMasq4 || iptMasq6) && !bpfMasq {
		return "", false
	}
	masq := ciliumBPFMasq + `: "true"`
	if !bpfMasq {
		masq = "no iptables masquerading (" + ciliumIPv4Masq + " and " + ciliumIPv6Masq + " off)"
	}
	return fmt.Sprintf("%s: %q with %s and %s not \"true\"", ciliumKPR, kpr, masq, ciliumLegacyRouting), true
}

// ciliumRefusal is the error of an agent that refuses to start under eBPF
// host routing: it names the setting and the fix on Cilium's side and on
// Egret's.
func ciliumRefusal(why string) error {
	return fmt.Errorf("eBPF host routing of Cilium is in effect (ConfigMap %s/%s: %s): it sends pod traffic past the node's routing and netfilter, where Egret steers it, so selected pods would leave as the node; "+
		"set %s: \"true\" in that ConfigMap (Helm: bpf.hostLegacyRouting=true) and restart Cilium's agents, then this one; "+
		"or, only if you know pod traffic still traverses the host's routing, set allowCiliumHostRouting: true in the steer configuration (docs/operations.md#supported-cnis)",
		CiliumConfigNamespace, CiliumConfigName, why, ciliumLegacyRouting)
}

// checkCilium reads Cilium's ConfigMap once, at start, and refuses eBPF
// host routing (unless allow). No ConfigMap (no Cilium) passes; so does a
// ServiceAccount that may not read it, with a warning naming the missing
// permission: the check is a guard, not a dependency. Any other error (the
// API not answering yet) is retried with backoff until ctx ends, as the
// source's own start waits for the API. Cilium reads the ConfigMap only when
// its agents start, so a change takes effect with their restart; restarting
// the steer agents then checks again.
func checkCilium(ctx context.Context, cms typedcorev1.ConfigMapsGetter, allow bool, log *slog.Logger) error {
	if cms == nil {
		return nil
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt}
	for {
		cm, err := cms.ConfigMaps(CiliumConfigNamespace).Get(ctx, CiliumConfigName, metav1.GetOptions{})
		switch {
		case err == nil:
			why, bpf := CiliumHostRouting(cm.Data)
			if !bpf {
				log.Info("Cilium found: host routing goes through the kernel (legacy), which steering needs", "configMap", CiliumConfigNamespace+"/"+CiliumConfigName)
				return nil
			}
			if allow {
				log.Warn("Cilium's eBPF host routing is in effect; starting anyway (allowCiliumHostRouting: true)", "setting", why)
				return nil
			}
			return ciliumRefusal(why)
		case apierrors.IsNotFound(err):
			return nil
		case apierrors.IsForbidden(err):
			log.Warn("cannot check for Cilium's eBPF host routing, which defeats steering: the agent's ServiceAccount lacks get on ConfigMap "+
				CiliumConfigNamespace+"/"+CiliumConfigName+" (Role and RoleBinding egret-steer-cilium-config in "+CiliumConfigNamespace+", deploy/steer/rbac.yaml); starting unchecked",
				"err", err.Error())
			return nil
		}
		in := backoff.Step()
		log.Warn("reading Cilium's configuration failed; retrying", "configMap", CiliumConfigNamespace+"/"+CiliumConfigName, "err", err.Error(), "in", in)
		select {
		case <-ctx.Done():
			return fmt.Errorf("checking ConfigMap %s/%s for Cilium's eBPF host routing: %w", CiliumConfigNamespace, CiliumConfigName, err)
		case <-time.After(in):
		}
	}
}
