#!/usr/bin/env bash
# release.sh is `make release` (docs/releasing.md): from this tree, into OUT,
#   egret-<v>.oci.tar             the image (Containerfile) for linux/amd64 and linux/arm64 as
#                                 one OCI image index, an OCI archive (buildah, no registry)
#   egret-<v>.oci-index.json      that index's bytes: their sha256 is the image's digest
#   linux-<arch>/egret, egress-router   the static binaries in the image, per arch
#   sbom/<binary>-linux-<arch>.cdx.json CycloneDX SBOM of each: every Go module in it
#   chart/egret-<v>.tgz           the Helm chart, `helm package`
#   chart/oci/                    the same as Helm's OCI artifact, an OCI image layout
#   SHA256SUMS                    every file above
#   SHA256SUMS.minisig, egret-<v>.oci-index.json.minisig   minisign signatures
#   minisign.pub                  the public key they verify with
# The signing key is RELEASE_KEY, a minisign secret key file (its public key beside it, or
# RELEASE_PUB); a real release also needs a clean git tree. Without RELEASE_KEY (CI) a
# throwaway key is generated into OUT, and the signatures' trusted comment, this script's
# first and last words and the key's file name all say so.
#
# Usage: hack/release/release.sh OUT     (make release: OUT = bin/release/$(cat VERSION))
# Env:   VERSION, IMAGE (the Makefile's), RELEASE_KEY, RELEASE_PUB, EGRET_TOOLS_DIR, MAKE
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
out="${1:?usage: hack/release/release.sh OUT}"
version="${VERSION:-$(cat VERSION)}"
image="${IMAGE:-ghcr.io/egret-gw/egret:$version}"
tools="${EGRET_TOOLS_DIR:-/var/cache/egret/bin}"
make="${MAKE:-make}"
arches=(amd64 arm64)
binaries=(egret egress-router)
start=$SECONDS

say() { echo "release: $*" >&2; }
die() {
	say "$*"
	exit 1
}
throwaway_banner() {
	cat >&2 <<EOF
release: ********************************************************************
release: RELEASE_KEY is not set: signing with a THROWAWAY key generated into
release: $out/minisign.key.THROWAWAY. These signatures prove nothing about who
release: made the files. This is not a release; set RELEASE_KEY to make one.
release: ********************************************************************
EOF
}

# The chart must say the version it ships: its default image tag is its appVersion.
chart=deploy/helm/egret
chart_version="$(awk '$1 == "version:" {print $2; exit}' "$chart/Chart.yaml")"
app_version="$(awk '$1 == "appVersion:" {gsub(/"/, "", $2); print $2; exit}' "$chart/Chart.yaml")"
if [[ $chart_version != "$version" || $app_version != "$version" ]]; then
	die "$chart/Chart.yaml has version $chart_version and appVersion $app_version, VERSION says $version: set both to $version"
fi

revision=""
dirty=""
if git rev-parse --git-dir >/dev/null 2>&1; then
	revision="$(git rev-parse HEAD)"
	dirty="$(git status --porcelain)"
fi
if [[ -n ${RELEASE_KEY:-} ]]; then
	[[ -f $RELEASE_KEY ]] || die "RELEASE_KEY=$RELEASE_KEY: no such file (want a minisign secret key)"
	pub="${RELEASE_PUB:-${RELEASE_KEY%.key}.pub}"
	[[ -f $pub ]] || die "no public key $pub for RELEASE_KEY (set RELEASE_PUB)"
	[[ -n $revision ]] || die "a release is made from a git checkout (its commit goes into the signatures)"
	[[ -z $dirty ]] || die "the tree has changes; a release is made from a clean checkout:"$'\n'"$dirty"
else
	throwaway_banner
fi

bash hack/release/tools.sh >&2
bash hack/helm.sh >&2

work="$(mktemp -d)"
list="localhost/egret-release-$$-$RANDOM"
cleanup() {
	bash hack/cluster/buildah.sh manifest rm "$list" >/dev/null 2>&1 || true
	for arch in "${arches[@]}"; do
		if [[ -f $work/$arch.iid ]]; then
			bash hack/cluster/buildah.sh rmi "$(cat "$work/$arch.iid")" >/dev/null 2>&1 || true
		fi
	done
	rm -rf "$work"
}
trap cleanup EXIT

rm -rf "$out"
mkdir -p "$out/sbom" "$out/chart"
if [[ -n ${RELEASE_KEY:-} ]]; then
	key="$RELEASE_KEY"
	cp "$pub" "$out/minisign.pub"
	comment="egret $version, commit $revision"
else
	key="$out/minisign.key.THROWAWAY"
	"$tools/minisign" -G -W -s "$key" -p "$out/minisign.pub" >/dev/null
	comment="egret $version, commit ${revision:-unknown}${dirty:++changes}, THROWAWAY key (RELEASE_KEY unset): not a release"
fi

# Each arch is staged exactly as `make image` stages the host's (make image-stage),
# cross-compiled (the Makefile's CGO_ENABLED=0 makes the binaries static), and built
# from the same Containerfile: FROM scratch and COPY only, so no emulator is needed.
bash hack/cluster/buildah.sh manifest create "$list" >/dev/null
for arch in "${arches[@]}"; do
	say "linux/$arch: binaries, SBOMs, image"
	GOARCH="$arch" "$make" -s --no-print-directory image-stage BIN="$work/$arch/bin" >&2
	mkdir -p "$out/linux-$arch"
	for b in "${binaries[@]}"; do
		install -m 0755 "$work/$arch/bin/image/$b" "$out/linux-$arch/$b"
		# The package URLs' goarch and goos come from `go env`, not from the binary.
		GOOS=linux GOARCH="$arch" "$tools/cyclonedx-gomod" bin -json -std -version "v$version" \
			-output "$out/sbom/$b-linux-$arch.cdx.json" "$out/linux-$arch/$b"
	done
	bash hack/cluster/buildah.sh bud -q --format oci --platform "linux/$arch" --manifest "$list" \
		--iidfile "$work/$arch.iid" -f Containerfile "$work/$arch" >/dev/null
done
archive="egret-$version.oci.tar"
bash hack/cluster/buildah.sh manifest push -q --all --format oci "$list" "oci-archive:$out/$archive:$image"
"$tools/ocitool" index -ref "$image" -out "$out/egret-$version.oci-index.json" "$out/$archive" >&2

say "chart"
"$tools/helm" package "$chart" -d "$out/chart" >/dev/null
"$tools/ocitool" chart -helm "$tools/helm" -out "$out/chart/oci" "$out/chart/egret-$version.tgz" >&2

say "SHA256SUMS and signatures"
(cd "$out" && find . -type f ! -name SHA256SUMS ! -name '*.minisig' ! -name 'minisign.*' -printf '%P\n' |
	LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
# One invocation signs both, so an encrypted key asks for its password once.
"$tools/minisign" -S -s "$key" -t "$comment" -m "$out/SHA256SUMS" -m "$out/egret-$version.oci-index.json"
for f in SHA256SUMS "egret-$version.oci-index.json"; do
	"$tools/minisign" -V -q -p "$out/minisign.pub" -m "$out/$f" || die "$f: the signature just made does not verify with $out/minisign.pub"
done
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not match the files"

say "$out: egret $version ($image, index $(sha256sum "$out/egret-$version.oci-index.json" | cut -c1-64)) in $((SECONDS - start))s"
if [[ -z ${RELEASE_KEY:-} ]]; then
	throwaway_banner
fi
