#!/usr/bin/env bash
# ec2-metadata-mock.sh builds AWS's instance metadata emulator, amazon-ec2-metadata-mock,
# from the Go module proxy (no prebuilt download). The cloud tests (control/cloud) run it
# as the instance metadata service (IMDSv2) the AWS SDK reads the instance, its region
# and its network interfaces from.
#
# The binary lands in ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}/ec2-metadata-mock, outside
# the repo. It is rebuilt only when missing or built from another version or Go (a stamp
# file records both), so a second run is a fast no-op. It is installed outside any module
# so its own go.mod decides its dependencies, which never reach Egret's.
#
# Usage: hack/ec2-metadata-mock.sh
# Env:   EGRET_TOOLS_DIR  where to put the binary
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
label=ec2-metadata-mock
# shellcheck source=hack/tools-lib.sh
source "$here/tools-lib.sh"

version=v1.13.0
pkg=github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock
bin="$out/ec2-metadata-mock"
want="$(stamp_of "$pkg" "$version")"
if fresh ec2-metadata-mock "$want"; then
	echo "ec2-metadata-mock: $version present in $out"
	exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "ec2-metadata-mock: building $version into $out ..."
(cd "$tmp" && GOBIN="$tmp" GOFLAGS=-buildvcs=false CGO_ENABLED=0 "$go_bin" install -ldflags="-s -w" "$pkg@$version")
install -m 0755 "$tmp/ec2-metadata-mock" "$bin"
echo "$want" >"$out/.ec2-metadata-mock.version"
echo "ec2-metadata-mock: installed $bin"
