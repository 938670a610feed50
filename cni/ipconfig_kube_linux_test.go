package cni

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egret-gw/egret/internal/nstest"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/egret-gw/egret/internal/kubetest"
)

// forwardAPI makes the test API server (on the host's loopback) reachable from inside
// the node namespace, where the plugin runs, and returns a kubeconfig pointing there
// and a function that takes the address down, as an API server that stops would.
func forwardAPI(t *testing.T, env *kubetest.Env, node *nstest.NS) (string, func()) {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	var ln net.Listener
	if err := node.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var down sync.Once
	stop := func() { down.Do(func() { ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target) // this goroutine's thread is in the host namespace
			if err != nil {
				in.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()

	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + ln.Addr().String()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path, stop
}

// startAPI starts a real kube-apiserver (with etcd) for the test and a
// client of it.
func startAPI(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	env := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return env, cs
}

func putConfigMap(t *testing.T, cs kubernetes.Interface, ns, name string, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestIPConfigFromAPIServer reads the IP configuration from a ConfigMap on a real
// kube-apiserver, with the override rules, through ADD → CHECK → DEL.
func TestIPConfigFromAPIServer(t *testing.T) {
	nstest.Root(t)
	env, cs := startAPI(t)
	putConfigMap(t, cs, "ns1", "egress-ip", map[string]string{
		"ip":    `{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"destinations":["198.51.100.0/24","2001:db8:99::/64"]}`,
		"notes": "other keys are ignored",
	})
	putConfigMap(t, cs, "routers", "per-pod", map[string]string{
		"podIP": `{"db-*":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"]},"other":{"addresses":["192.0.2.77/24"]}}`,
	})

	for _, v := range specVersions {
		t.Run(v, func(t *testing.T) {
			l := newLab(t, true)
			kubeconfig, _ := forwardAPI(t, env, l.Node)
			r := newRuntime(t, l, "db-router")
			// The second case reads a ConfigMap of another namespace, which the node allows.
			// The kubeconfig is the node's, in its settings file, as egress-router install writes it.
			r.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDirWith(t, `{"allowMasterTypes":["veth"],"allowCrossNamespaceConfigMaps":true,"kubeconfig":`+quote(kubeconfig)+`,"networkNamespaces":{"*":["*"]}}`)}, t.TempDir(), nil)
			before := routesOf(t, l.Pod, netlink.FAMILY_V4)

			// Namespace from K8S_POD_NAMESPACE; the ConfigMap's /24 is narrowed by the
			// overrides to the one allowed host; the gateway is fixed by the overrides.
			list := confList(t, v, TypeEgressRouter, `"ipConfig":{"name":"egress-ip","overrides":{"addresses":["192.0.2.99/24","2001:db8:2::99/64"],"gateway":"192.0.2.1","destinations":["198.51.100.10/32","2001:db8:99::10/128","203.0.113.0/24"]}}`)
			if _, err := r.add(list); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			assertPlumbed(t, l, true, false)
			if src, ok := udpProbe(t, l, allowed4, reachable); !ok || src != netip.MustParseAddr(egress4) {
				t.Errorf("allowed destination: received=%v from %v", ok, src)
			}
			if _, ok := udpProbe(t, l, denied4, unreachable); ok {
				t.Error("the override's intersection should block " + denied4)
			}
			if _, ok := udpProbe(t, l, allowed6, reachable); !ok {
				t.Error("allowed IPv6 destination unreachable")
			}
			if v != "0.3.0" && v != "0.3.1" {
				if err := r.check(list); err != nil {
					t.Errorf("CHECK: %v", err)
				}
			}
			if err := r.del(list); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			assertClean(t, l, before)

			// podIP in a ConfigMap of an explicit namespace, no overrides: any destination.
			list = confList(t, v, TypeOpenshiftEgress, `"ipConfig":{"namespace":"routers","name":"per-pod"}`)
			if _, err := r.add(list); err != nil {
				t.Fatalf("ADD (podIP ConfigMap): %v", err)
			}
			assertPlumbed(t, l, false, false)
			if _, ok := udpProbe(t, l, denied4, reachable); !ok {
				t.Error("no destinations anywhere, yet " + denied4 + " is unreachable")
			}
			if err := r.del(list); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			assertClean(t, l, before)

			// Overrides that forbid the ConfigMap's address refuse it; nothing is left.
			list = confList(t, v, TypeEgressRouter, `"ipConfig":{"name":"egress-ip","overrides":{"addresses":["192.0.2.50/24"]}}`)
			_, err := r.add(list)
			if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "overrides.addresses") || !strings.Contains(err.Error(), "192.0.2.99/24") {
				t.Errorf("forbidden address: %v", err)
			}
			// A gateway other than the fixed one is refused too.
			putOnce(t, cs, "gw-"+strings.ReplaceAll(v, ".", ""), `{"addresses":["192.0.2.99/24"],"gateway":"192.0.2.254"}`)
			list = confList(t, v, TypeEgressRouter, `"ipConfig":{"name":"gw-`+strings.ReplaceAll(v, ".", "")+`","overrides":{"gateway":"192.0.2.1"}}`)
			if _, err := r.add(list); cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "overrides.gateway") {
				t.Errorf("other gateway: %v", err)
			}
			// A ConfigMap that does not exist is a clear error.
			list = confList(t, v, TypeEgressRouter, `"ipConfig":{"name":"absent"}`)
			if _, err := r.add(list); err == nil || !strings.Contains(err.Error(), "ns1/absent") {
				t.Errorf("absent ConfigMap: %v", err)
			}
			if _, err := l.Pod.NL.LinkByName("net1"); err == nil {
				t.Error("refused ADD left net1")
			}
			assertClean(t, l, before)
		})
	}
}

func putOnce(t *testing.T, cs kubernetes.Interface, name, ip string) {
	putConfigMap(t, cs, "ns1", name, map[string]string{"ip": ip})
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestIPConfigAPIDown: an unreachable API server is "try again later", not a config error.
func TestIPConfigAPIDown(t *testing.T) {
	nstest.Root(t)
	l := newLab(t, true)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*clientcmdapiConfig("https://127.0.0.1:1"), kc); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, l, "db")
	r.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDirWith(t, `{"allowMasterTypes":["veth"],"kubeconfig":`+quote(kc)+`,"networkNamespaces":{"*":["*"]}}`)}, t.TempDir(), nil)
	_, err := r.add(confList(t, "1.0.0", TypeEgressRouter, `"ipConfig":{"name":"x"}`))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Errorf("API server down: %v, want code %d", err, types.ErrTryAgainLater)
	}
}

func clientcmdapiConfig(server string) *clientcmdapi.Config {
	c := clientcmdapi.NewConfig()
	c.Clusters["c"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	c.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	c.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	c.CurrentContext = "x"
	return c
}

// TestCheckWithAPIServerDown: CHECK of an ipConfig attachment whose plumbing is intact
// passes while the API server cannot be reached (it checks against prevResult), and
// still fails when the plumbing is broken. The ConfigMap is written as upstream writes
// it: addresses and destinations without prefix lengths, and a redirect.
func TestCheckWithAPIServerDown(t *testing.T) {
	nstest.Root(t)
	env, cs := startAPI(t)
	putConfigMap(t, cs, "ns1", "egress-ip", map[string]string{
		"ip": `{"addresses":["192.0.2.99"],"destinations":["198.51.100.10","80 UDP 198.51.100.20"],"gateway":"192.0.2.1"}`,
	})
	l := newLab(t, true)
	kubeconfig, apiDown := forwardAPI(t, env, l.Node)
	dir := pluginDirWith(t, `{"allowMasterTypes":["veth"],"kubeconfig":`+quote(kubeconfig)+`,"networkNamespaces":{"*":["*"]}}`)
	const conf = `{"cniVersion":"1.0.0","name":"e","type":"egress-router","ipConfig":{"name":"egress-ip"}}`
	const args = "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=router"
	before := routesOf(t, l.Pod, netlink.FAMILY_V4)
	res, err := runPluginFrom(t, l, dir, l.Pod.Path(), "ADD", conf, args)
	if err != nil {
		t.Fatalf("ADD: %v %s", err, res)
	}
	if !strings.Contains(string(res), "192.0.2.99/24") {
		t.Errorf("the bare address did not take the master's /24: %s", res)
	}
	check := withPrevResult(t, conf, res)
	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "CHECK", check, args); err != nil {
		t.Fatalf("CHECK with the API server up: %v %s", err, out)
	}

	apiDown()
	// Down for real: an ADD, which must read the ConfigMap, is told to try again later.
	out, err := runPluginFrom(t, l, dir, nstest.Named(t).Path(), "ADD", conf, args)
	if e := cniError(t, out); err == nil || e.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD with the API server down: %v %s, want code %d", err, out, types.ErrTryAgainLater)
	}
	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "CHECK", check, args); err != nil {
		t.Errorf("CHECK with the API server down and the plumbing intact: %v %s", err, out)
	}
	saved := breakDefault(t, l, netlink.FAMILY_V4)
	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "CHECK", check, args); err == nil || !strings.Contains(cniError(t, out).Msg, "default route") {
		t.Errorf("CHECK with the API server down and the default route gone: %v %s", err, out)
	}
	restoreDefault(t, l, saved)

	if out, err := runPluginFrom(t, l, dir, l.Pod.Path(), "DEL", conf, args); err != nil {
		t.Fatalf("DEL with the API server down: %v %s", err, out)
	}
	assertClean(t, l, before)
}
