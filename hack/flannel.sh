#!/usr/bin/env bash
# flannel.sh builds flanneld from the Go module proxy (no prebuilt download) at
# the version hack/flannel-tools/go.mod pins: the overlay CNI of
# `make cluster-up CLUSTER_CNI=flannel` (its VXLAN backend and its own
# masquerade), which `make e2e-cni` runs the cluster end-to-end test on.
# flannel links its UDP backend with cgo, so this one tool is built with cgo.
#
# The binary lands in ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}/flanneld,
# rebuilt only when missing or built from another flannel or Go version.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/flannel-tools"
label=flannel
# shellcheck source=hack/tools-lib.sh
source "$here/tools-lib.sh"

version="$(awk '$1 == "github.com/flannel-io/flannel" {print $2; exit}' "$mod/go.mod")"
if [[ -z "$version" ]]; then
	echo "flannel: cannot read flannel's version from $mod/go.mod" >&2
	exit 1
fi
tool_cgo=1
build_tool flanneld "$mod" github.com/flannel-io/flannel "$version" \
	"-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$version"
