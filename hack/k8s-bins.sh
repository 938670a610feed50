#!/usr/bin/env bash
# k8s-bins.sh builds the real etcd, kube-apiserver and kubectl that
# internal/kubetest runs, from the Go module proxy (no prebuilt downloads).
#
# Binaries land in ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}, outside the repo.
# A binary is rebuilt only when it is missing or was built from other
# versions (a stamp file records them), so a second run is a fast no-op.
#
# The cluster of `make cluster-up` also needs kubelet, kube-controller-manager,
# kube-scheduler and kube-proxy; name them to build them.
#
# Usage: hack/k8s-bins.sh [etcd] [kube-apiserver] [kubectl] [kubelet] ...   (default: the first three)
# Env:   EGRET_TOOLS_DIR  where to put the binaries
#        K8S_BUILD_JOBS   go build -p (default 2; the machine is shared)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/k8s-tools"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$mod/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$mod/go.mod")"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
	echo "k8s-bins: cannot read versions from $mod/go.mod" >&2
	exit 1
fi

label=k8s-bins
# shellcheck source=hack/tools-lib.sh
source "$here/tools-lib.sh"

# Version stamps so `kube-apiserver --version` and `kubectl version` say
# v1.37.2 instead of v0.0.0-master.
minor="${k8s_version#v*.}"
minor="${minor%%.*}"
major="${k8s_version#v}"
major="${major%%.*}"
vpkg_flags() {
	local p="$1"
	printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s ' \
		"$p" "$k8s_version" "$p" "$major" "$p" "$minor" "$p" "$p" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

build() { # name package version
	local name="$1" pkg="$2" version="$3"
	local ldflags="-s -w"
	case "$name" in
	kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler | kube-proxy)
		ldflags+=" $(vpkg_flags k8s.io/component-base/version) $(vpkg_flags k8s.io/client-go/pkg/version)"
		;;
	esac
	build_tool "$name" "$mod" "$pkg" "$version" "$ldflags"
}

want=("$@")
if [[ ${#want[@]} -eq 0 ]]; then
	want=(kube-apiserver etcd kubectl)
fi
for w in "${want[@]}"; do
	case "$w" in
	etcd) build etcd go.etcd.io/etcd/server/v3 "$etcd_version" ;;
	kube-apiserver) build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_version" ;;
	kubectl) build kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_version" ;;
	kubelet | kube-controller-manager | kube-scheduler | kube-proxy)
		build "$w" "k8s.io/kubernetes/cmd/$w" "$k8s_version"
		;;
	*)
		echo "k8s-bins: unknown binary $w (want etcd, kube-apiserver, kubectl, kubelet, kube-controller-manager, kube-scheduler or kube-proxy)" >&2
		exit 2
		;;
	esac
done
