# Shared settings of the one-machine cluster (hack/cluster/up.sh, down.sh).
# Sourced, not run. Ranges avoid the lab's (192.0.2.0/24, 198.18.0.0/15,
# 198.51.100.0/24, 203.0.113.0/24).
set -euo pipefail

CLUSTER_NAME=egretc
# Everything the cluster writes, removed by down.sh; binaries stay in the cache.
STATE=${EGRET_CLUSTER_STATE:-/var/lib/egret-cluster}
TOOLS=${EGRET_TOOLS_DIR:-/var/cache/egret/bin}
CNI_BIN=${EGRET_CNI_BIN:-/usr/lib/cni}

BRIDGE=egretc0
# The cluster's address family: ipv4 (the default) or ipv6, IPv6 only: nodes,
# pods, services, the API server, the registry, the outside server and the
# tunnel between nodes. make cluster-up CLUSTER_FAMILY=ipv6. Both use the same
# names, so one cluster at a time; up.sh records the family in $STATE/family.
CLUSTER_FAMILY=${CLUSTER_FAMILY:-ipv4}
SERVER_HTTP=8080
SERVER_UDP=8081
case $CLUSTER_FAMILY in
ipv4)
	HOST_IP=10.77.0.1          # the host on the node network: API server, registry
	NODE_NET=10.77.0.0/24      # the nodes' underlay
	ROUTER_IP=10.77.0.254      # the outside network's router, the nodes' default route
	SERVER_IP=10.80.0.1        # the outside server, reachable only through the router
	POD_NET=10.78.0.0/16       # a /24 per node: 10.78.<i>.0/24
	SVC_NET=10.79.0.0/16
	SVC_API_IP=10.79.0.1       # the kubernetes Service
	LOOPBACK=127.0.0.1
	HOST_URL=$HOST_IP          # an address in a URL or host:port
	IPT=iptables
	ANY_NET=0.0.0.0/0
	REGISTRY=$HOST_IP:5000     # the name images carry
	;;
ipv6)
	HOST_IP=fd77::1
	NODE_NET=fd77::/64
	ROUTER_IP=fd77::254
	SERVER_IP=fd80::1
	POD_NET=fd78::/48          # a /64 per node: fd78:0:0:<i>::/64
	SVC_NET=fd79::/108         # the API server's limit for an IPv6 service range
	SVC_API_IP=fd79::1
	LOOPBACK=::1
	HOST_URL="[$HOST_IP]"
	IPT=ip6tables
	ANY_NET=::/0
	# Image references cannot hold an IPv6 literal: the registry goes by a
	# name, which each node's containerd maps to the address (a mirror) and
	# hack/cluster/buildah.sh resolves through $STATE/hosts.
	REGISTRY_NAME=egretc-registry
	REGISTRY=$REGISTRY_NAME:5000
	;;
*)
	echo "cluster: CLUSTER_FAMILY=$CLUSTER_FAMILY: give ipv4 or ipv6" >&2
	exit 1
	;;
esac
REGISTRY_ADDR=$HOST_URL:5000 # where the registry listens
K8S_VERSION=v1.37.2
PAUSE_IMAGE=$REGISTRY/pause:3.10
BUSYBOX_IMAGE=$REGISTRY/busybox:1.35

# The pod network: bridge (the default: the bridge plugin with a /24 per node,
# static routes between the nodes and an eth0-only masquerade) or flannel
# (flanneld of hack/flannel.sh: its kube subnet manager, VXLAN backend on
# 8472 and its own masquerade of everything leaving the pod network; IPv4).
# make cluster-up CLUSTER_CNI=flannel; up.sh records it in $STATE/cni.
CLUSTER_CNI=${CLUSTER_CNI:-bridge}
case $CLUSTER_CNI/$CLUSTER_FAMILY in
bridge/* | flannel/ipv4) ;;
*)
	echo "cluster: CLUSTER_CNI=$CLUSTER_CNI with CLUSTER_FAMILY=$CLUSTER_FAMILY: give bridge, or flannel with ipv4" >&2
	exit 1
	;;
esac

# The gateway nodes' second network (issue 28), IPv4 clusters only: bridge
# $BRIDGE2 with no address of the host's, a veth eth1 into each gateway
# node ($NET2_PREFIX.<10+i>/24), and namespace $OUT2_NS as its router
# ($NET2_ROUTER), with an echo server on $SERVER2_IP behind it: reachable
# only through the gateways' eth1. An EgressIP from 10.81.0.0/24 is placed
# by the nodes' host-cidrs on eth1 and leaves there.
BRIDGE2=egretc1
NET2_PREFIX=10.81.0
NET2_ROUTER=$NET2_PREFIX.254
SERVER2_IP=10.82.0.1
OUT2_NS=$CLUSTER_NAME-out2
node_ip2() { echo "$NET2_PREFIX.$((10 + NODE_INDEX[$1]))"; }

# name index role: workers run ordinary pods; gateways are egress-capable.
NODES=(w1 w2 gw1 gw2)
declare -A NODE_INDEX=([w1]=1 [w2]=2 [gw1]=3 [gw2]=4)
declare -A NODE_ROLE=([w1]=worker [w2]=worker [gw1]=gateway [gw2]=gateway)

OUT_NS=$CLUSTER_NAME-out

node_ns() { echo "$CLUSTER_NAME-$1"; }
node_ip() {
	case $CLUSTER_FAMILY in
	ipv4) echo "10.77.0.$((10 + NODE_INDEX[$1]))" ;;
	ipv6) echo "fd77::$((10 + NODE_INDEX[$1]))" ;;
	esac
}
node_pod_net() {
	case $CLUSTER_FAMILY in
	ipv4) echo "10.78.${NODE_INDEX[$1]}.0/24" ;;
	ipv6) echo "fd78:0:0:${NODE_INDEX[$1]}::/64" ;;
	esac
}
# The node network's prefix length.
net_len() { echo "${NODE_NET#*/}"; }
# host:port with brackets around an IPv6 address.
host_port() { if [[ $1 == *:* ]]; then echo "[$1]:$2"; else echo "$1:$2"; fi; }
node_dir() { echo "$STATE/nodes/$1"; }
# The node's own mount namespace, persisted here: its /opt/cni/bin and
# /etc/cni/net.d are its own, and its mounts are shared (a systemd host's are;
# this machine's are private, which mount propagation refuses).
node_mnt() { echo "$STATE/ns/$1.mnt"; }
# Runs a command in the node: its network and mount namespaces.
in_node() { local n=$1; shift; nsenter --net="/run/netns/$(node_ns "$n")" --mount="$(node_mnt "$n")" -- "$@"; }

KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
kubectl_() { "$TOOLS/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }

log() { echo "cluster: $*" >&2; }

# pid files of everything up.sh starts: $STATE/pids/<name>.pid
start_daemon() { # name logfile cmd...
	local name=$1 logf=$2; shift 2
	local pidf=$STATE/pids/$name.pid
	if [[ -f $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
		return 0
	fi
	setsid "$@" >"$logf" 2>&1 </dev/null &
	echo $! >"$pidf"
}
