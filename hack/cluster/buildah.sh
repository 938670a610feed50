#!/usr/bin/env bash
# buildah with the project's storage in the cache (never /var/lib/containers)
# and the vfs driver, which needs no overlay mounts from this machine.
# While an IPv6 cluster is up, its registry's name (image references cannot
# hold an IPv6 literal) resolves through the cluster's hosts file, in a mount
# namespace of buildah's own: the host's /etc/hosts is left alone.
set -euo pipefail
root=${EGRET_BUILDAH_ROOT:-/var/cache/egret/containers}
hosts=${EGRET_CLUSTER_STATE:-/var/lib/egret-cluster}/hosts
if [[ -f $hosts && -z ${EGRET_BUILDAH_HOSTS:-} ]]; then
	exec unshare --mount --propagation private -- env EGRET_BUILDAH_HOSTS=1 \
		sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$hosts" bash "$0" "$@"
fi
exec buildah --root "$root/storage" --runroot "$root/run" --storage-driver vfs "$@"
