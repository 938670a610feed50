#!/usr/bin/env bash
# buildah with the project's storage in the cache (never /var/lib/containers)
# and the vfs driver, which needs no overlay mounts from this machine.
set -euo pipefail
root=${EGRET_BUILDAH_ROOT:-/var/cache/egret/containers}
exec buildah --root "$root/storage" --runroot "$root/run" --storage-driver vfs "$@"
