#!/usr/bin/env bash
# cnitool.sh builds the reference CNI runtime tool, cnitool, from the Go module proxy at
# the version of github.com/containernetworking/cni that go.mod uses. The egress-router
# tests (cni/cnitool_linux_test.go) drive the plugin through it.
#
# The binary lands in ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}/cnitool, outside the repo.
# It is rebuilt only when missing or built from another version or Go (a stamp file
# records both), so a second run is a fast no-op.
#
# Usage: hack/cnitool.sh
# Env:   EGRET_TOOLS_DIR  where to put the binary
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
label=cnitool
# shellcheck source=hack/tools-lib.sh
source "$here/tools-lib.sh"

version="$(awk '$1 == "github.com/containernetworking/cni" {print $2; exit}' "$here/../go.mod")"
if [[ -z "$version" ]]; then
	echo "cnitool: cannot read the github.com/containernetworking/cni version from go.mod" >&2
	exit 1
fi

bin="$out/cnitool"
stamp="$out/.cnitool.version"
want="$(stamp_of github.com/containernetworking/cni/cnitool "$version")"
if fresh cnitool "$want"; then
	echo "cnitool: $version present in $out"
	exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "cnitool: building $version into $out ..."
# Outside any module so the tool's own go.mod decides its dependencies.
(cd "$tmp" && GOBIN="$tmp" GOFLAGS=-buildvcs=false "$go_bin" install -ldflags="-s -w" "github.com/containernetworking/cni/cnitool@$version")
install -m 0755 "$tmp/cnitool" "$bin"
echo "$want" >"$stamp"
echo "cnitool: installed $bin"
