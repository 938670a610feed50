#!/usr/bin/env bash
# tools.sh builds the tools `make release` runs, from the Go module proxy (no prebuilt
# downloads), into ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}:
#   cyclonedx-gomod  CycloneDX's SBOM generator for Go (its `bin` mode reads a binary's
#                    module list, what `go version -m` prints)
#   minisign         the signer and verifier (aead.dev/minisign, the minisign format;
#                    docs/releasing.md says why not cosign)
#   ocitool          this folder's module: the chart as an OCI artifact, the image index
# Each is rebuilt only when missing or built from another version or Go (a stamp file
# records both; ocitool's version is a hash of its source), so a second run is a no-op.
# cyclonedx-gomod and minisign are installed outside any module so that their own go.mod
# decides their dependencies and the binaries know their versions.
#
# Usage: hack/release/tools.sh
# Env:   EGRET_TOOLS_DIR  where to put the binaries
#        K8S_BUILD_JOBS   go build -p (default 2; the machine is shared)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
label=release-tools
# shellcheck source=hack/tools-lib.sh
source "$here/../tools-lib.sh"

# install_tool NAME PKG VERSION: go install PKG@VERSION into $out/NAME unless fresh.
install_tool() {
	local name="$1" pkg="$2" version="$3" want tmp
	want="$(stamp_of "$pkg" "$version")"
	if fresh "$name" "$want"; then
		echo "$label: $name $version present in $out"
		return 0
	fi
	echo "$label: building $name $version ($pkg) into $out ..."
	tmp="$(mktemp -d)"
	(cd "$tmp" && GOBIN="$tmp" GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0 \
		"$go_bin" install -p "$jobs" -ldflags="-s -w" "$pkg@$version")
	install -m 0755 "$tmp/$name" "$out/$name"
	rm -rf "$tmp"
	echo "$want" >"$out/.$name.version"
	echo "$label: installed $out/$name"
}

install_tool cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod v1.10.0
install_tool minisign aead.dev/minisign/cmd/minisign v0.3.0

src="$(cd "$here" && cat go.mod go.sum ocitool/*.go | sha256sum | cut -c1-16)"
build_tool ocitool "$here" ./ocitool "src-$src" "-s -w"
