#!/usr/bin/env bash
# Installs the Debian packages Egret's build, tests and demo use, when missing.
# Idempotent and quiet when everything is there. Needs root.
set -euo pipefail

# command → Debian package that provides it.
declare -A need=(
  [ip]=iproute2
  [nft]=nftables
  [iperf3]=iperf3
  [tcpdump]=tcpdump
  [curl]=curl
  [ethtool]=ethtool
  [clang]=clang
  [llc]=llvm
  [bpftool]=bpftool
  [prometheus]=prometheus
  [promtool]=prometheus
  [conntrack]=conntrack
  [trafgen]=netsniff-ng
  [pgrep]=procps
  # The one-machine cluster (hack/cluster) and the image (make image).
  [containerd]=containerd
  [runc]=runc
  [buildah]=buildah
  [docker-registry]=docker-registry
  [busybox]=busybox-static
  [openssl]=openssl
  [gcc]=gcc
  [nsenter]=util-linux
  [iptables]=iptables
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
# Headers for regenerating the XDP program (go generate); the committed object files
# mean plain builds never need them.
[ -e /usr/include/bpf/bpf_helpers.h ] || missing+=(libbpf-dev)
# The cluster's pod network (bridge + host-local) and the static pause binary.
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ "$(uname -m)" != x86_64 ] || missing+=(libc6-dev)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "hack/deps.sh: missing packages ${missing[*]}; run as root to install them" >&2
  exit 1
fi
readarray -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "hack/deps.sh: installing ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
