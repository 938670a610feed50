#!/usr/bin/env bash
# deadcode.sh fails when production code has functions that no command reaches: code
# without a caller rots and misleads. It runs golang.org/x/tools/cmd/deadcode (built from
# the Go module proxy into ${EGRET_TOOLS_DIR:-/var/cache/egret/bin}, once) over ./cmd/...
# and reports every unreachable function that hack/deadcode-allow.txt does not list.
#
# Packages under internal/ whose name ends in "test" (nstest, kubetest, promtest) are
# test helpers shared across packages and are not checked; generated code (bpf2go) is
# skipped by deadcode itself.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${EGRET_TOOLS_DIR:-/var/cache/egret/bin}"
version=v0.52.0
go_bin="$(command -v go || echo /usr/local/go/bin/go)"
bin="$out/deadcode" stamp="$out/.deadcode.version"
want="golang.org/x/tools/cmd/deadcode@$version $("$go_bin" env GOVERSION)"
if [[ ! -x "$bin" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	mkdir -p "$out"
	echo "deadcode: building $want into $out ..."
	(cd "$root" && GOBIN="$out" GOFLAGS=-buildvcs=false "$go_bin" install "golang.org/x/tools/cmd/deadcode@$version")
	echo "$want" >"$stamp"
fi

module="$(cd "$root" && "$go_bin" list -m)"
cd "$root"
found="$("$bin" -f '{{range .Funcs}}{{$.Path}}.{{.Name}}{{"\n"}}{{end}}' ./cmd/... | sed "s#^$module/##" | grep -v '^internal/[a-z]*test\.' || true)"
allowed="$(sed 's/#.*//; s/[[:space:]]*$//' "$here/deadcode-allow.txt" | { grep -v '^$' || true; } | sort -u)"
left="$(comm -23 <(printf '%s\n' "$found" | { grep -v '^$' || true; } | sort -u) <(printf '%s\n' "$allowed"))"
stale="$(comm -13 <(printf '%s\n' "$found" | { grep -v '^$' || true; } | sort -u) <(printf '%s\n' "$allowed"))"
status=0
if [[ -n "$left" ]]; then
	echo "deadcode: production functions that no command reaches (give each a caller, delete it,"
	echo "or list it in hack/deadcode-allow.txt with the reason it must stay):"
	printf '  %s\n' $left
	status=1
fi
if [[ -n "$stale" ]]; then
	echo "deadcode: hack/deadcode-allow.txt lists functions that are reached or gone; remove them:"
	printf '  %s\n' $stale
	status=1
fi
[[ $status == 0 ]] && echo "deadcode: every production function is reached from ./cmd/..."
exit $status
