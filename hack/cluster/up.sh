#!/usr/bin/env bash
# up.sh: a real Kubernetes cluster on this one machine (make cluster-up).
#
#   host:       etcd, kube-apiserver (PodSecurity: baseline unless a namespace
#               says otherwise), kube-controller-manager, kube-scheduler,
#               a registry (docker-registry) on the node network's bridge
#   nodes:      w1 w2 (workers), gw1 gw2 (gateway-capable), each in its own
#               network and mount namespace with its own containerd, runc,
#               kubelet and kube-proxy; a veth eth0 on the bridge; pods on the
#               bridge CNI with a /24 per node and routes between the nodes;
#               pod traffic leaving by eth0 is masqueraded to the node IP
#   outside:    namespace egretc-out, the nodes' default router, with the echo
#               server (egret lab echo-server) on 10.80.0.1: it answers HTTP and
#               UDP with the source address it saw; the kernel answers ping
#   second NIC: (IPv4) gw1 and gw2 also have eth1 on bridge egretc1
#               (10.81.0.0/24), whose router egretc-out2 (10.81.0.254) has a
#               second echo server on 10.82.0.1, reachable only through it
#
# CLUSTER_CNI=flannel runs flannel (hack/flannel.sh) as each node's pod network
# instead of the bridge plugin's static routes: flanneld per node (kube subnet
# manager, VXLAN backend, --ip-masq), the CNI configuration written from its
# subnet.env as flannel's CNI plugin would delegate it (bridge, host-local).
#
# CLUSTER_FAMILY=ipv6 builds the same cluster IPv6-only (common.sh has both
# address plans): fd77::/64 nodes, fd78::/48 pods, fd79::/108 services, the
# server fd80::1, the registry as egretc-registry:5000.
#
# Idempotent: a second run starts only what is missing. Ends by printing
# `export KUBECONFIG=<path>`. down.sh removes everything.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"

[[ $(id -u) == 0 ]] || { echo "cluster-up: run as root" >&2; exit 1; }
EGRET_BIN=${EGRET_BIN:-$repo/bin/egret}
[[ -x $EGRET_BIN ]] || { echo "cluster-up: $EGRET_BIN missing: run make build" >&2; exit 1; }
for b in etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy; do
	[[ -x $TOOLS/$b ]] || bash "$repo/hack/k8s-bins.sh" "$b"
done
for b in containerd ctr containerd-shim-runc-v2 runc buildah docker-registry busybox openssl iptables conntrack gcc ethtool; do
	command -v "$b" >/dev/null || { echo "cluster-up: $b missing: run make deps" >&2; exit 1; }
done
[[ -x $CNI_BIN/bridge && -x $CNI_BIN/host-local ]] || { echo "cluster-up: CNI plugins missing in $CNI_BIN: run make deps" >&2; exit 1; }

mkdir -p "$STATE"/{pki,pids,logs,ns,nodes,registry}
if [[ -f $STATE/family && $(cat "$STATE/family") != "$CLUSTER_FAMILY" ]]; then
	echo "cluster-up: an $(cat "$STATE/family") cluster is up; make cluster-down first" >&2
	exit 1
fi
echo "$CLUSTER_FAMILY" >"$STATE/family"
if [[ -f $STATE/cni && $(cat "$STATE/cni") != "$CLUSTER_CNI" ]]; then
	echo "cluster-up: a cluster with CNI $(cat "$STATE/cni") is up; make cluster-down first" >&2
	exit 1
fi
echo "$CLUSTER_CNI" >"$STATE/cni"
[[ $CLUSTER_CNI != flannel ]] || bash "$repo/hack/flannel.sh" >/dev/null
start=$SECONDS

# --- certificates -----------------------------------------------------------
pki=$STATE/pki
cert() { # name CN O [SANs]
	local n=$1 cn=$2 o=$3 san=${4:-}
	[[ -f $pki/$n.crt ]] && return 0
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$n.key" 2>/dev/null
	local subj="/CN=$cn"
	[[ -n $o ]] && subj="/O=$o$subj"
	local ext="$pki/$n.ext"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [[ -n $san ]]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl req -new -key "$pki/$n.key" -subj "$subj" -out "$pki/$n.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$n.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 30 -extfile "$ext" -out "$pki/$n.crt" 2>/dev/null
}
if [[ ! -f $pki/ca.crt ]]; then
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=egret-cluster-ca" -days 30 -out "$pki/ca.crt" 2>/dev/null
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
	openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
cert apiserver kube-apiserver "" "IP:$HOST_IP,IP:$SVC_API_IP,IP:$LOOPBACK,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert admin egret-admin system:masters
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kube-proxy system:kube-proxy ""
for n in "${NODES[@]}"; do cert "node-$n" "system:node:$n" system:nodes; done

kubeconfig() { # file certname
	local f=$1 c=$2
	[[ -f $f ]] && return 0
	cat >"$f" <<KC
apiVersion: v1
kind: Config
clusters:
- name: egret
  cluster: {server: "https://$HOST_URL:6443", certificate-authority: "$pki/ca.crt"}
users:
- name: u
  user: {client-certificate: "$pki/$c.crt", client-key: "$pki/$c.key"}
contexts:
- name: egret
  context: {cluster: egret, user: u}
current-context: egret
KC
}
kubeconfig "$KUBECONFIG_ADMIN" admin
kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
kubeconfig "$STATE/scheduler.kubeconfig" scheduler
kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy

# --- network ----------------------------------------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link add "$BRIDGE" type bridge
	# nodad: an IPv6 address is usable at once, not after duplicate detection.
	ip addr add "$HOST_IP/$(net_len)" dev "$BRIDGE" $([[ $CLUSTER_FAMILY == ipv6 ]] && echo nodad)
	ip link set "$BRIDGE" up
fi
# One end on the bridge ($BRIDGE unless $5 names another), the other named
# $3 in namespace $2.
veth() { # host-end ns inner-name addr/len [bridge]
	local h=$1 ns=$2 in=$3 addr=$4 br=${5:-$BRIDGE}
	ip netns list | grep -qw "$ns" || ip netns add "$ns"
	if ! ip link show "$h" >/dev/null 2>&1; then
		ip link add "$h" type veth peer name "$in" netns "$ns"
		ip link set "$h" master "$br" up
		if [[ $CLUSTER_FAMILY == ipv6 ]]; then
			# The test takes a node's eth0 down and up: its static address
			# must survive that, as an IPv4 one does.
			ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$in.keep_addr_on_down=1"
			ip -n "$ns" addr add "$addr" dev "$in" nodad
		else
			ip -n "$ns" addr add "$addr" dev "$in"
		fi
		ip -n "$ns" link set "$in" up
		ip -n "$ns" link set lo up
	fi
	# A NIC puts full checksums and no TSO/GSO super-frames on the wire; a veth
	# hands over half-done checksums, which the gateway's XDP path would forward
	# as they are (as the lab does, docs/lab.md). Only this machine needs it.
	ip netns exec "$ns" ethtool -K "$in" tx off tso off gso off gro off >/dev/null 2>&1
}
veth "${CLUSTER_NAME}o" "$OUT_NS" eth0 "$ROUTER_IP/$(net_len)"
if [[ $CLUSTER_FAMILY == ipv6 ]]; then
	ip -n "$OUT_NS" addr replace "$SERVER_IP/128" dev lo
else
	ip -n "$OUT_NS" addr replace "$SERVER_IP/32" dev lo
fi
for n in "${NODES[@]}"; do
	ns=$(node_ns "$n")
	veth "${CLUSTER_NAME}-$n" "$ns" eth0 "$(node_ip "$n")/$(net_len)"
	ip -n "$ns" route replace default via "$ROUTER_IP"
	# flannel routes between the nodes' pod networks itself (its VXLAN).
	for m in "${NODES[@]}"; do
		[[ $m == "$n" || $CLUSTER_CNI == flannel ]] || ip -n "$ns" route replace "$(node_pod_net "$m")" via "$(node_ip "$m")"
	done
	# The host reaches the pods too (the API server answers pods that call it
	# through the kubernetes Service, which keeps their source).
	ip route replace "$(node_pod_net "$n")" via "$(node_ip "$n")"
	if [[ $CLUSTER_FAMILY == ipv6 ]]; then
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.forwarding=1
	else
		ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
	fi
	# Pods leaving by the uplink go out as the node; pod-to-pod and
	# anything steered into another device keeps its source. (flannel
	# masquerades on its own, on every interface.)
	[[ $CLUSTER_CNI == flannel ]] && continue
	ip netns exec "$ns" "$IPT" -t nat -C POSTROUTING -s "$POD_NET" ! -d "$POD_NET" -o eth0 -j MASQUERADE 2>/dev/null ||
		ip netns exec "$ns" "$IPT" -t nat -A POSTROUTING -s "$POD_NET" ! -d "$POD_NET" -o eth0 -j MASQUERADE
done

# --- the gateways' second network (common.sh) ---------------------------------
if [[ $CLUSTER_FAMILY == ipv4 ]]; then
	if ! ip link show "$BRIDGE2" >/dev/null 2>&1; then
		ip link add "$BRIDGE2" type bridge
		ip link set "$BRIDGE2" up
	fi
	veth "${CLUSTER_NAME}p" "$OUT2_NS" eth0 "$NET2_ROUTER/24" "$BRIDGE2"
	ip -n "$OUT2_NS" addr replace "$SERVER2_IP/32" dev lo
	for n in "${NODES[@]}"; do
		[[ ${NODE_ROLE[$n]} == gateway ]] || continue
		veth "${CLUSTER_NAME}2-$n" "$(node_ns "$n")" eth1 "$(node_ip2 "$n")/24" "$BRIDGE2"
		ip -n "$(node_ns "$n")" route replace "$SERVER2_IP/32" via "$NET2_ROUTER" dev eth1
	done
fi

# --- control plane ------------------------------------------------------------
# PodSecurity as a restricted cluster has it: every namespace without a level
# of its own enforces baseline, so Egret's host-network NET_ADMIN pods run only
# through their namespace's label (deploy/namespace.yaml); e2e/ checks both.
cat >"$STATE/admission.yaml" <<AC
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: baseline
      audit-version: latest
      warn: baseline
      warn-version: latest
    exemptions: {usernames: [], runtimeClasses: [], namespaces: []}
AC
start_daemon etcd "$STATE/logs/etcd.log" "$TOOLS/etcd" --name=egretc --data-dir="$STATE/etcd" \
	--listen-client-urls=http://127.0.0.1:23790 --advertise-client-urls=http://127.0.0.1:23790 \
	--listen-peer-urls=http://127.0.0.1:23800 --initial-advertise-peer-urls=http://127.0.0.1:23800 \
	--initial-cluster=egretc=http://127.0.0.1:23800 --unsafe-no-fsync --log-level=warn
start_daemon kube-apiserver "$STATE/logs/kube-apiserver.log" "$TOOLS/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:23790 --bind-address="$HOST_IP" --advertise-address="$HOST_IP" \
	--secure-port=6443 --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
	--client-ca-file="$pki/ca.crt" --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
	--service-cluster-ip-range="$SVC_NET" --authorization-mode=Node,RBAC \
	--enable-admission-plugins=NodeRestriction --allow-privileged=true \
	--admission-control-config-file="$STATE/admission.yaml" \
	--kubelet-preferred-address-types=InternalIP --profiling=false
for i in $(seq 120); do
	kubectl_ get --raw /readyz >/dev/null 2>&1 && break
	sleep 0.5
done
kubectl_ get --raw /readyz >/dev/null || { echo "cluster-up: kube-apiserver not ready; see $STATE/logs/kube-apiserver.log" >&2; exit 1; }
# What kubeadm binds: kube-proxy's user to its role.
kubectl_ apply -f - >/dev/null <<CRB
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: egretc-kube-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-proxier}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-proxy}]
CRB
start_daemon kube-controller-manager "$STATE/logs/kube-controller-manager.log" "$TOOLS/kube-controller-manager" \
	--kubeconfig="$STATE/controller-manager.kubeconfig" --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$STATE/controller-manager.kubeconfig" --bind-address=127.0.0.1 --secure-port=10357 \
	--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
	--use-service-account-credentials=true --leader-elect=false --cluster-cidr="$POD_NET" \
	--service-cluster-ip-range="$SVC_NET" --allocate-node-cidrs=false --profiling=false
start_daemon kube-scheduler "$STATE/logs/kube-scheduler.log" "$TOOLS/kube-scheduler" \
	--kubeconfig="$STATE/scheduler.kubeconfig" --authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
	--authorization-kubeconfig="$STATE/scheduler.kubeconfig" --bind-address=127.0.0.1 --secure-port=10359 \
	--leader-elect=false --profiling=false

# --- registry and the base images --------------------------------------------
cat >"$STATE/registry.yml" <<RC
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $STATE/registry}
  delete: {enabled: true}
http: {addr: "$REGISTRY_ADDR"}
RC
if [[ -n ${REGISTRY_NAME:-} ]]; then
	{ cat /etc/hosts; echo "$HOST_IP $REGISTRY_NAME"; } >"$STATE/hosts"
fi
start_daemon registry "$STATE/logs/registry.log" docker-registry serve "$STATE/registry.yml"
for i in $(seq 60); do curl -fs "http://$REGISTRY_ADDR/v2/" >/dev/null && break; sleep 0.5; done
# Builds a FROM scratch image from a directory and pushes it, unless present.
push_image() { # ref dir
	local ref=$1 dir=$2 repo=${1#*/}
	if curl -fs -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
		"http://$REGISTRY_ADDR/v2/${repo%:*}/manifests/${repo##*:}"; then
		return 0
	fi
	bash "$repo_root/hack/cluster/buildah.sh" bud -q --format oci -f "$dir/Containerfile" -t "$ref" "$dir" >/dev/null
	bash "$repo_root/hack/cluster/buildah.sh" push -q --tls-verify=false "$ref" "docker://$ref" >/dev/null
}
repo_root=$repo
img=$STATE/images
mkdir -p "$img/pause" "$img/busybox/bin"
if [[ ! -x $img/pause/pause ]]; then
	gcc -static -Os -o "$img/pause/pause" "$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c" 2>/dev/null ||
		gcc -static -Os -o "$img/pause/pause" "$here/pause.c"
	printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$img/pause/Containerfile"
fi
push_image "$PAUSE_IMAGE" "$img/pause"
if [[ ! -x $img/busybox/bin/busybox ]]; then
	cp "$(command -v busybox)" "$img/busybox/bin/busybox"
	for a in sh ls cat wget ping ping6 sleep ip nc; do ln -sf busybox "$img/busybox/bin/$a"; done
	# CMD, not ENTRYPOINT, as Docker's busybox image: `kubectl run ... -- sleep
	# 3600` (README) replaces the command instead of becoming sh's arguments.
	printf 'FROM scratch\nCOPY bin /bin\nCMD ["sh"]\n' >"$img/busybox/Containerfile"
fi
push_image "$BUSYBOX_IMAGE" "$img/busybox"

# --- nodes --------------------------------------------------------------------
# The CNI paths the product's DaemonSets write (hostPath) are each node's own:
# mountpoints for them on the shared filesystem, removed by down.sh. So is
# /run/egret, where a stopping gateway leaves its flows for the next one on
# its node: shared, a gateway could resume another node's flows.
for d in /opt/cni/bin /etc/cni/net.d /run/egret; do
	if [[ ! -d $d ]]; then
		mkdir -p "$d"
		echo "$d" >>"$STATE/created-dirs"
	fi
done
if ! mountpoint -q "$STATE/ns"; then
	mount --bind "$STATE/ns" "$STATE/ns"
	mount --make-private "$STATE/ns"
fi
for n in "${NODES[@]}"; do
	d=$(node_dir "$n")
	mkdir -p "$d"/{cni-bin,cni-conf,cni-ipam,containerd,kubelet,pod-logs,certs,run-egret}
	cp -u "$CNI_BIN"/{bridge,host-local,loopback,portmap} "$d/cni-bin/"
	# With flannel the configuration waits for its subnet.env (below).
	[[ $CLUSTER_CNI == flannel ]] || cat >"$d/cni-conf/10-egretc.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "egretc", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam",
            "ranges": [[{"subnet": "$(node_pod_net "$n")"}]], "routes": [{"dst": "$ANY_NET"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
CNI
	mnt=$(node_mnt "$n")
	if ! mountpoint -q "$mnt" 2>/dev/null; then
		touch "$mnt"
		unshare --mount="$mnt" --propagation private sh -c "
			mount --make-rshared /
			mount --bind '$d/cni-bin' /opt/cni/bin
			mount --bind '$d/cni-conf' /etc/cni/net.d
			mount --bind '$d/run-egret' /run/egret"
	fi
	# cgroup v1 with the cgroupfs driver: each node under its own root.
	for c in /sys/fs/cgroup/*/; do
		[[ -e $c/cgroup.procs ]] || continue
		case $c in */unified/) continue ;; esac
		mkdir -p "$c$CLUSTER_NAME-$n"
	done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CLUSTER_NAME-$n/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CLUSTER_NAME-$n/cpuset.mems"
	cat >"$d/containerd.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine lacks CAP_SYS_RESOURCE even for root: runc could not lower
  # a container's oom_score_adj below its own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
    endpoint = ["http://$REGISTRY_ADDR"]
TOML
	cat >"$d/kubelet.yaml" <<KY
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
address: "$(node_ip "$n")"
healthzBindAddress: "$LOOPBACK"
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /$CLUSTER_NAME-$n
# This machine runs cgroup v1.
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "unix://$d/containerd.sock"
podCIDR: "$(node_pod_net "$n")"
podLogsDir: "$d/pod-logs"
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
maxPods: 60
# One disk for every node: eviction thresholds low enough not to fire.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
KY
	kc=$d/kubelet.kubeconfig
	[[ -f $kc ]] || { kubeconfig "$kc" "node-$n"; }
	# kube-proxy exits when its configuration file changes: rewrite only a changed one.
	cat >"$d/kube-proxy.yaml.new" <<KP
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$STATE/kube-proxy.kubeconfig"}
hostnameOverride: $n
bindAddress: $(node_ip "$n")
clusterCIDR: $POD_NET
mode: iptables
metricsBindAddress: "$(host_port "$LOOPBACK" 10249)"
healthzBindAddress: "$(host_port "$(node_ip "$n")" 10256)"
conntrack: {maxPerCore: 0, min: 0}
KP
	if cmp -s "$d/kube-proxy.yaml.new" "$d/kube-proxy.yaml"; then rm "$d/kube-proxy.yaml.new"; else mv "$d/kube-proxy.yaml.new" "$d/kube-proxy.yaml"; fi
	start_daemon "containerd-$n" "$STATE/logs/containerd-$n.log" \
		nsenter --net="/run/netns/$(node_ns "$n")" --mount="$mnt" -- containerd --config "$d/containerd.toml"
	# The kubelet exits at once if containerd does not answer yet (seen on a
	# loaded machine): wait for it first.
	for _ in $(seq 300); do
		ctr --address "$d/containerd.sock" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	ctr --address "$d/containerd.sock" version >/dev/null 2>&1 ||
		{ echo "cluster-up: containerd of $n does not answer after 30s; see $STATE/logs/containerd-$n.log" >&2; exit 1; }
	start_daemon "kubelet-$n" "$STATE/logs/kubelet-$n.log" \
		nsenter --net="/run/netns/$(node_ns "$n")" --mount="$mnt" -- "$TOOLS/kubelet" --config="$d/kubelet.yaml" \
		--kubeconfig="$kc" --hostname-override="$n" --node-ip="$(node_ip "$n")" --root-dir="$d/kubelet" \
		--cert-dir="$d/certs" --node-labels="egret.dev/cluster-role=${NODE_ROLE[$n]}"
	start_daemon "kube-proxy-$n" "$STATE/logs/kube-proxy-$n.log" \
		nsenter --net="/run/netns/$(node_ns "$n")" --mount="$mnt" -- "$TOOLS/kube-proxy" --config="$d/kube-proxy.yaml"
done

# --- pod CIDRs ------------------------------------------------------------------
# Each node's /24 goes into its spec.podCIDR, as kube-controller-manager's
# allocation would put it: Egret's steer agent then blocks a new pod's traffic
# until it has classified the pod (fail closed by pod CIDR), rather than
# letting it out as the node meanwhile; flannel's kube subnet manager leases it.
for n in "${NODES[@]}"; do
	for _ in $(seq 120); do
		kubectl_ get node "$n" >/dev/null 2>&1 && break
		sleep 0.5
	done
	if [[ -z $(kubectl_ get node "$n" -o jsonpath='{.spec.podCIDR}') ]]; then
		kubectl_ patch node "$n" --type merge -p "{\"spec\":{\"podCIDR\":\"$(node_pod_net "$n")\",\"podCIDRs\":[\"$(node_pod_net "$n")\"]}}" >/dev/null
	fi
done

# --- flannel --------------------------------------------------------------------
# flanneld runs in each node. It writes subnet.env, from which the node's CNI
# configuration is made as flannel's CNI plugin delegates it: the bridge
# plugin with flannel's MTU, no masquerade of its own (flanneld's --ip-masq
# does it), host-local IPAM on the node's subnet.
if [[ $CLUSTER_CNI == flannel ]]; then
	mkdir -p "$STATE/flannel"
	cat >"$STATE/flannel/net-conf.json" <<NC
{"Network": "$POD_NET", "Backend": {"Type": "vxlan"}}
NC
	for n in "${NODES[@]}"; do
		d=$(node_dir "$n")
		start_daemon "flanneld-$n" "$STATE/logs/flanneld-$n.log" \
			nsenter --net="/run/netns/$(node_ns "$n")" --mount="$(node_mnt "$n")" -- env NODE_NAME="$n" "$TOOLS/flanneld" \
			--kube-subnet-mgr --kubeconfig-file="$KUBECONFIG_ADMIN" --iface=eth0 --ip-masq \
			--subnet-file="$d/flannel-subnet.env" --net-config-path="$STATE/flannel/net-conf.json" --healthz-port=0
	done
	for n in "${NODES[@]}"; do
		d=$(node_dir "$n")
		for _ in $(seq 120); do
			[[ -s $d/flannel-subnet.env ]] && break
			sleep 0.5
		done
		[[ -s $d/flannel-subnet.env ]] || { echo "cluster-up: flanneld of $n wrote no subnet.env; see $STATE/logs/flanneld-$n.log" >&2; exit 1; }
		# shellcheck disable=SC1091
		subnet=$(. "$d/flannel-subnet.env" && echo "$FLANNEL_SUBNET") mtu=$(. "$d/flannel-subnet.env" && echo "$FLANNEL_MTU")
		cat >"$d/cni-conf/10-egretc.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "egretc", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true, "mtu": $mtu,
   "ipam": {"type": "host-local", "dataDir": "$d/cni-ipam", "ranges": [[{"subnet": "${subnet%.*}.0/24"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
CNI
	done
fi

# --- the outside server ------------------------------------------------------
start_daemon echo "$STATE/logs/echo.log" nsenter --net="/run/netns/$OUT_NS" -- \
	"$EGRET_BIN" lab echo-server --lab "$CLUSTER_NAME" --http "$(host_port "$SERVER_IP" "$SERVER_HTTP")" --udp "$(host_port "$SERVER_IP" "$SERVER_UDP")"
if [[ $CLUSTER_FAMILY == ipv4 ]]; then
	start_daemon echo2 "$STATE/logs/echo2.log" nsenter --net="/run/netns/$OUT2_NS" -- \
		"$EGRET_BIN" lab echo-server --lab "$CLUSTER_NAME" --http "$SERVER2_IP:$SERVER_HTTP" --udp "$SERVER2_IP:$SERVER_UDP"
fi

# --- wait ---------------------------------------------------------------------
for i in $(seq 180); do
	ready=$(kubectl_ get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
	[[ $ready == "${#NODES[@]}" ]] && break
	sleep 1
done
if [[ $ready != "${#NODES[@]}" ]]; then
	echo "cluster-up: $ready of ${#NODES[@]} nodes Ready after 180s; logs in $STATE/logs" >&2
	kubectl_ get nodes >&2 || true
	exit 1
fi
log "4 nodes ($CLUSTER_FAMILY) Ready in $((SECONDS - start))s"
echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
