#!/usr/bin/env bash
# down.sh: removes everything up.sh made (make cluster-down): processes,
# namespaces, mounts, cgroups and $STATE. The binaries and the buildah
# storage stay in the cache. Safe to run when nothing is up.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"
set +e

stop_pid() { # pidfile
	local f=$1 p
	[[ -f $f ]] || return 0
	p=$(cat "$f")
	if kill -0 "$p" 2>/dev/null; then
		kill "$p" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
	fi
	rm -f "$f"
}
# Every process in the cgroups under root (the containers of a node).
kill_cgroup_tree() { # cgroup-name
	local c
	for c in /sys/fs/cgroup/pids/"$1" /sys/fs/cgroup/freezer/"$1"; do
		[[ -d $c ]] || continue
		find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
	done
}
rmdir_cgroup_tree() {
	local c
	for c in /sys/fs/cgroup/*/"$1"; do
		[[ -d $c ]] || continue
		find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
	done
}

for n in "${NODES[@]}"; do
	stop_pid "$STATE/pids/kubelet-$n.pid"
	stop_pid "$STATE/pids/kube-proxy-$n.pid"
	stop_pid "$STATE/pids/flanneld-$n.pid"
done
for n in "${NODES[@]}"; do
	kill_cgroup_tree "$CLUSTER_NAME-$n"
	mnt=$(node_mnt "$n")
	# containerd, its shims and anything else left in the node's mount namespace.
	if [[ -e $mnt ]] && mountpoint -q "$mnt"; then
		ino=$(stat -L -c %i "$mnt" 2>/dev/null)
		for p in /proc/[0-9]*; do
			[[ $(stat -L -c %i "$p/ns/mnt" 2>/dev/null) == "$ino" ]] && kill -9 "${p#/proc/}" 2>/dev/null
		done
		# Sandboxes' network namespaces: files on the shared /run, mounts in the node's.
		mapfile -t sb < <(nsenter --mount="$mnt" findmnt -rn -t nsfs -o TARGET 2>/dev/null | grep '^/run/netns/cni-')
		for f in "${sb[@]}"; do rm -f "$f" 2>/dev/null; done
	fi
	stop_pid "$STATE/pids/containerd-$n.pid"
done
sleep 0.2
for n in "${NODES[@]}"; do
	kill_cgroup_tree "$CLUSTER_NAME-$n"
	mnt=$(node_mnt "$n")
	if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
	for _ in $(seq 20); do
		rmdir_cgroup_tree "$CLUSTER_NAME-$n"
		compgen -G "/sys/fs/cgroup/*/$CLUSTER_NAME-$n" >/dev/null || break
		sleep 0.25
	done
	ip netns del "$(node_ns "$n")" 2>/dev/null
	ip link del "${CLUSTER_NAME}-$n" 2>/dev/null
	ip link del "${CLUSTER_NAME}2-$n" 2>/dev/null
done
for s in echo echo2 registry kube-scheduler kube-controller-manager kube-apiserver etcd; do
	stop_pid "$STATE/pids/$s.pid"
done
ip netns del "$OUT_NS" 2>/dev/null
ip link del "${CLUSTER_NAME}o" 2>/dev/null
ip link del "$BRIDGE" 2>/dev/null # and with it the host's routes to the pods
ip netns del "$OUT2_NS" 2>/dev/null
ip link del "${CLUSTER_NAME}p" 2>/dev/null
ip link del "$BRIDGE2" 2>/dev/null
if mountpoint -q "$STATE/ns" 2>/dev/null; then umount "$STATE/ns" || umount -l "$STATE/ns"; fi
if [[ -f $STATE/created-dirs ]]; then
	while read -r d; do rmdir "$d" 2>/dev/null; rmdir "$(dirname "$d")" 2>/dev/null; done <"$STATE/created-dirs"
fi
# Whatever mounts remain under the state (none expected) must go before the files.
findmnt -rn -o TARGET | grep "^$STATE" | sort -r | xargs -r -n1 umount -l 2>/dev/null
rm -rf "$STATE"
left=$(compgen -G "/sys/fs/cgroup/*/$CLUSTER_NAME-*"; ip netns list | grep "^$CLUSTER_NAME-"; ip link show "$BRIDGE" 2>/dev/null; ip link show "$BRIDGE2" 2>/dev/null)
if [[ -n $left ]]; then
	echo "cluster-down: left behind:" >&2
	echo "$left" >&2
	exit 1
fi
echo "cluster: down" >&2
