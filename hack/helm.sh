#!/usr/bin/env bash
# helm.sh builds helm from the Go module proxy (no prebuilt download) at the
# version hack/helm-tools/go.mod pins. The chart test in deploy/helm renders
# and lints deploy/helm/egret with it.
#
# The binary lands in ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}/helm, outside
# the repo. It is rebuilt only when missing or built from another Helm or Go
# version (a stamp file records both), so a second run is a fast no-op.
#
# Usage: hack/helm.sh
# Env:   EGRET_TOOLS_DIR  where to put the binary
#        K8S_BUILD_JOBS   go build -p (default 2; the machine is shared)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/helm-tools"
label=helm
# shellcheck source=hack/tools-lib.sh
source "$here/tools-lib.sh"

pkg="$(awk '$1 == "tool" {print $2; exit}' "$mod/go.mod")"
major="${pkg#helm.sh/helm/}"
major="${major%%/*}"
version="$(awk -v m="helm.sh/helm/$major" '$1 == m {print $2; exit}' "$mod/go.mod")"
if [[ -z "$pkg" || -z "$version" ]]; then
	echo "helm: cannot read the helm tool and its version from $mod/go.mod" >&2
	exit 1
fi

# The version stamp Helm's own Makefile sets, so `helm version` says v4.x.y
# instead of the bare minor version compiled into the source.
vpkg="helm.sh/helm/$major/internal/version"
build_tool helm "$mod" "$pkg" "$version" "-s -w -X $vpkg.version=$version -X $vpkg.metadata= -X $vpkg.gitTreeState=clean"
