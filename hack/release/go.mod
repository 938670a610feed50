// Module release holds ocitool, the OCI steps of `make release` (release.sh): the chart
// as Helm's OCI artifact, the image index the release signs. It is separate from the main
// module so its dependencies never reach Egret's go.mod; tools.sh builds it into
// $EGRET_TOOLS_DIR with the release's other tools.
module github.com/egret-gw/egret/hack/release

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/opencontainers/image-spec v1.1.1
	oras.land/oras-go/v2 v2.6.2
)

require (
	github.com/opencontainers/go-digest v1.0.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
