#!/usr/bin/env bash
# coldbuild.sh MODE: times, from an empty Go build cache, `make build`'s compile and then
# what the tests compile on top of it: the egret and egress-router binaries they run
# (internal/testbin) and two test binaries (gwagent, cni). README.md quotes its figures.
#   MODE=split: the tests with go's defaults (cgo on, no -trimpath), as before the
#               Makefile exported one set of flags: every dependency compiled twice.
#   MODE=one:   the tests with make build's flags (CGO_ENABLED=0, -trimpath), as now.
# Run both in one go for a fair ratio: bash hack/coldbuild.sh split; bash hack/coldbuild.sh one
set -euo pipefail
mode=${1:?usage: coldbuild.sh split|one}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export GOCACHE=/tmp/gocache-cold-$mode
out=/tmp/coldbuild-$mode
rm -rf "$GOCACHE" "$out"
mkdir -p "$out"
t0=$(date +%s.%N)
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/" ./cmd/...
t1=$(date +%s.%N)
if [[ $mode == one ]]; then
	export CGO_ENABLED=0 GOFLAGS="$(go env GOFLAGS) -trimpath"
fi
go build -o "$out/t/" ./cmd/egret ./cmd/egress-router
go test -count=1 -run '^$' ./control/gwagent/ ./cni/ >/dev/null
t2=$(date +%s.%N)
echo "$mode: make build $(echo "$t1 - $t0" | bc) s, then the tests' builds $(echo "$t2 - $t1" | bc) s, total $(echo "$t2 - $t0" | bc) s"
rm -rf "$GOCACHE" "$out"
