# tools-lib.sh is sourced by the scripts that build cached tools from the Go
# module proxy (k8s-bins.sh, helm.sh, cnitool.sh): where they go, which go
# builds them, and the version stamp that makes a second run a no-op.
# The caller sets `label` (its name in messages) before sourcing.

out="${EGRET_TOOLS_DIR:-/var/cache/egret/bin}"
jobs="${K8S_BUILD_JOBS:-2}"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"
if [[ ! -x "$go_bin" ]]; then
	echo "$label: go not found (expected in PATH or /usr/local/go/bin)" >&2
	exit 1
fi
mkdir -p "$out"

# stamp_of PKG VERSION: what a binary built from PKG@VERSION with this go records.
stamp_of() { echo "$1@$2 $("$go_bin" env GOVERSION)"; }

# fresh NAME STAMP: true when $out/NAME exists and was built as STAMP.
fresh() {
	local bin="$out/$1" stamp="$out/.$1.version"
	[[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$2" ]]
}

# build_tool NAME MODDIR PKG VERSION LDFLAGS: go build PKG in the module MODDIR
# into $out/NAME unless it is fresh; static (cgo off) unless the caller sets
# tool_cgo=1. It builds to a temporary name and
# renames, so an interrupted build never leaves a half-written binary that
# looks present.
build_tool() {
	local name="$1" mod="$2" pkg="$3" version="$4" ldflags="$5"
	local want
	want="$(stamp_of "$pkg" "$version")"
	if fresh "$name" "$want"; then
		echo "$label: $name $version present in $out"
		return 0
	fi
	echo "$label: building $name $version ($pkg) into $out ..."
	local start=$SECONDS
	(cd "$mod" && GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED="${tool_cgo:-0}" \
		"$go_bin" build -p "$jobs" -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
	mv -f "$out/$name.tmp" "$out/$name"
	echo "$want" >"$out/.$name.version"
	echo "$label: built $name in $((SECONDS - start))s"
}
