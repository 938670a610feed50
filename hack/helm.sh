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
#        HELM_BUILD_JOBS  go build -p (default 2; the machine is shared)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod="$here/helm-tools"
out="${EGRET_TOOLS_DIR:-/var/cache/egret/bin}"
jobs="${HELM_BUILD_JOBS:-2}"

go_bin="$(command -v go || echo /usr/local/go/bin/go)"
if [[ ! -x "$go_bin" ]]; then
	echo "helm: go not found (expected in PATH or /usr/local/go/bin)" >&2
	exit 1
fi

pkg="$(awk '$1 == "tool" {print $2; exit}' "$mod/go.mod")"
major="${pkg#helm.sh/helm/}"
major="${major%%/*}"
version="$(awk -v m="helm.sh/helm/$major" '$1 == m {print $2; exit}' "$mod/go.mod")"
if [[ -z "$pkg" || -z "$version" ]]; then
	echo "helm: cannot read the helm tool and its version from $mod/go.mod" >&2
	exit 1
fi

bin="$out/helm"
stamp="$out/.helm.version"
want="$pkg@$version $("$go_bin" env GOVERSION)"
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
	echo "helm: $version present in $out"
	exit 0
fi

mkdir -p "$out"
echo "helm: building $version ($pkg) into $out ..."
start=$SECONDS
# The version stamp Helm's own Makefile sets, so `helm version` says v4.x.y
# instead of the bare minor version compiled into the source.
vpkg="helm.sh/helm/$major/internal/version"
ldflags="-s -w -X $vpkg.version=$version -X $vpkg.metadata= -X $vpkg.gitTreeState=clean"
# Build to a temporary name and rename, so an interrupted build never leaves a
# half-written binary that looks present.
(cd "$mod" && GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0 \
	"$go_bin" build -p "$jobs" -ldflags "$ldflags" -o "$bin.tmp" "$pkg")
mv -f "$bin.tmp" "$bin"
echo "$want" >"$stamp"
echo "helm: built $version in $((SECONDS - start))s"
