# Egret: make build | test | demo | bench. Run as root on Debian: the tests and the
# demo build network namespaces, attach XDP programs and open AF_XDP sockets.
GO        ?= go
BIN       := bin
TOOLS_DIR ?= /var/cache/egret/bin
# The release version: `egret version` prints it, the image and deploy/ carry it as tag.
VERSION   := $(shell cat VERSION)
IMAGE     ?= ghcr.io/egret-gw/egret:$(VERSION)
# Static binaries: the image is FROM scratch.
LDFLAGS   := -s -w -X main.version=$(VERSION)
# One set of compile flags for every go command here (build, vet, test) and for the
# binaries the tests build (internal/testbin, which sets the same when run without make):
# a cold machine then compiles each dependency once, not once per flag set. The race
# run needs cgo and compiles its own instrumented copies anyway.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -trimpath)
export EGRET_TOOLS_DIR := $(TOOLS_DIR)
# The lab's end-to-end tests run through the real Egret gateway (kernel = the baseline).
EGRET_LAB_GATEWAY ?= egret
export EGRET_LAB_GATEWAY
# The fault harness's TestChaos (bench/chaos) plays its short variant in make test (about
# 100 s); make chaos plays every fault. EGRET_CHAOS=off skips it on a local run, never under CI.
EGRET_CHAOS_SHORT ?= 1
export EGRET_CHAOS_SHORT
# The unit and privileged tests share the 2-core machine: one package at a time keeps
# namespace-heavy tests from starving each other.
TEST_FLAGS ?= -count=1 -timeout 25m -p 1

.PHONY: all build deps tools test test-unit cross vet check fmt fuzz bpf demo bench bench-lab bench-report bench-controlplane bench-failover chaos soak dashboard-png clean image image-stage cluster-up cluster-push cluster-down e2e-ipv6 e2e-cni

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# Debian packages the tests and the demo need (installed only when missing).
deps:
	@bash hack/deps.sh

# Binaries built from the Go module proxy and cached outside the repository:
# etcd, kube-apiserver and kubectl for the control-plane tests, cnitool for the CNI tests,
# kubelet, kube-controller-manager, kube-scheduler and kube-proxy for the cluster of
# e2e/ (make cluster-up), helm for the chart's tests (deploy/helm_test.go), and
# ec2-metadata-mock (AWS's instance metadata emulator) for the cloud tests (docs/cloud.md).
tools:
	@bash hack/k8s-bins.sh etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy
	@bash hack/cnitool.sh
	@bash hack/helm.sh
	@bash hack/ec2-metadata-mock.sh

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

# Layering and dead code: the import diagram in docs/architecture.md matches go list, no
# role imports another, only commands import metrics and the lab, and every production
# function is reached from a command (hack/deadcode-allow.txt lists the few exceptions).
check:
	$(GO) run ./hack/importgraph -check
	@bash hack/deadcode.sh

# ./... includes e2e/: it builds the image, brings up the cluster of make cluster-up
# (unless one is up), installs deploy/ and checks egress end to end (CI=true: never skips).
test: deps tools build image-stage vet cross check
	$(GO) test $(TEST_FLAGS) ./...
	CGO_ENABLED=1 $(GO) test -count=1 -race -timeout 10m ./conntrack/... ./nat/... ./gateway/ ./gateway/header/

# The conntrack lock-free read path is amd64-only; other architectures take
# the locked fallback. Vet the data plane for arm64 so the fallback builds.
cross:
	GOARCH=arm64 $(GO) vet ./conntrack/... ./gateway/...

# Only the tests that need neither root nor the cached binaries.
test-unit:
	$(GO) test -count=1 -short ./...

# The main job: the lab in network namespaces with the real controller, gateway and steer
# agents; who egresses as whom; a gateway killed and the failover timed.
# make demo DEMO_FLAGS=--keep leaves the lab up; DEMO_FLAGS=--json prints JSON.
DEMO_FLAGS ?=
demo: deps build
	$(BIN)/egret demo $(DEMO_FLAGS)

# Each parser and the whole pipeline under the coverage-guided fuzzer (FUZZTIME each).
FUZZTIME ?= 60s
fuzz:
	$(GO) test ./gateway -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./gateway -run '^$$' -fuzz '^FuzzPipeline$$' -fuzztime $(FUZZTIME)
	for f in FuzzIPv6Ext FuzzGeneve FuzzIPv4; do \
	  $(GO) test ./gateway/header -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) || exit 1; done

# Regenerate the XDP programs' Go bindings and object files (Egret's and the bench lab's
# xdp-reflector; needs clang, llvm, libbpf-dev).
bpf:
	$(GO) generate ./gateway/xdp ./bench/lab

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=1s ./gateway/... ./conntrack/... ./nat/... ./control/...

# The speed ratios that guard the data plane, in under a minute on a quiet machine
# (hack/benchguard/bounds.go: TrackBatch at 1M flows within 0.33x a Go map, the pipeline vs
# copy_only; each round a go test run of its own, so each pair is seconds apart); fails when
# a ratio is past its bound. Run it before submitting any change to conntrack/, nat/ or
# gateway/. Not part of make test: it times things.
.PHONY: bench-guard
bench-guard:
	$(GO) run ./hack/benchguard

# The benchmark harness (docs/benchmarks.md): the data plane through one gateway, Egret
# against the kernel in one run (NDR/PDR, latency, connection rate), then the flow sync's
# cost (the gateway agent with the sync on over off, est-10k and est-1M) and the NAT log's
# (the agent with the log on over off, cps and est-10k), after the other parts
# present under bench/ (control plane, failover); each part writes its <part>.json,
# <part>.md and plots into the report folder BENCH_OUT. The data plane runs last so the
# output ends with its summary line. Root.
# BENCH_FLAGS=-quick tries it in a few minutes, BENCH_FLAGS=-extra adds the extra scenarios
# (reply direction, bidirectional, ICMP errors, TCP setup, two queues); bench-report then puts the folder into
# docs/benchmarks.md and docs/bench/.
BENCH_OUT   ?= $(BIN)/bench-report
BENCH_FLAGS ?=
bench-lab: deps build
	@rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	$(MAKE) --no-print-directory bench-controlplane bench-failover BENCH_OUT=$(BENCH_OUT)
	$(GO) run ./bench/lab -egret $(BIN)/egret -out $(BENCH_OUT) $(BENCH_FLAGS)

bench-report:
	$(GO) run ./bench/report -in $(BENCH_OUT)

# Control plane at scale on a real kube-apiserver (no root): 500 nodes, 10k EgressIPs, 100k
# pods; BENCH_SCALE=0.05 for a quick run. Writes controlplane.{json,md} and its plots into BENCH_OUT.
BENCH_SCALE ?= 1
bench-controlplane: build
	$(GO) run ./bench/controlplane -out $(BENCH_OUT) -scale $(BENCH_SCALE) -egret $(BIN)/egret

# Failover distribution in the managed lab (root): gateways killed one after another, the
# status move and the first packet through the new gateway timed. Writes failover.{json,md}.
FAILOVER_KILLS ?= 20
bench-failover: deps build
	$(GO) run ./bench/failover -out $(BENCH_OUT) -kills $(FAILOVER_KILLS) -egret $(BIN)/egret

# The fault harness (docs/reliability.md) on the managed lab (root): steady traffic from
# every pod, the faults one at a time with recovery between, every packet's source checked;
# one line per fault, then the summary line; fails when an invariant is broken.
chaos: deps build
	$(GO) run ./bench/chaos -egret $(BIN)/egret

# The 30-minute soak (not in make test): the chaos traffic with churn, a gateway rebooted
# every 5 minutes, every Egret process sampled; plots and soak.md into SOAK_OUT.
SOAK_OUT ?= egret-soak
soak: deps build
	$(GO) run ./bench/chaos -egret $(BIN)/egret -soak 30m -out $(SOAK_OUT)

# Render docs/dashboard.png from a real Prometheus scraping the managed lab under traffic.
dashboard-png: deps build
	EGRET_DASHBOARD_PNG=$(CURDIR)/docs/dashboard.png $(GO) test -run TestPrometheusLab -count=1 ./metrics/

# The image (Containerfile) as an OCI archive, bin/egret-$(VERSION).oci.tar, built with
# buildah from the binaries of `make build`; no registry involved. `podman load`,
# `ctr images import`, `skopeo copy oci-archive:...` or the cluster's registry take it.
image-stage: build
	@mkdir -p $(BIN)/image
	cp $(BIN)/egret $(BIN)/egress-router $(BIN)/image/
	cp /etc/ssl/certs/ca-certificates.crt $(BIN)/image/
	printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >$(BIN)/image/passwd
	printf 'root:x:0:\nnonroot:x:65532:\n' >$(BIN)/image/group

image: deps image-stage
	bash hack/cluster/buildah.sh bud -q --format oci -f Containerfile -t $(IMAGE) .
	rm -f $(BIN)/egret-$(VERSION).oci.tar
	bash hack/cluster/buildah.sh push -q $(IMAGE) oci-archive:$(BIN)/egret-$(VERSION).oci.tar:$(IMAGE)
	@echo "image: $(IMAGE) in $(BIN)/egret-$(VERSION).oci.tar"

# The release of this tree (docs/releasing.md) into RELEASE_OUT, with no registry: the
# image for linux/amd64 and linux/arm64 as one OCI index (an OCI archive), the static
# binaries per arch, a CycloneDX SBOM of each, the Helm chart packaged and as an OCI
# artifact layout, SHA256SUMS, and minisign signatures of SHA256SUMS and of the image
# index. RELEASE_KEY names the release owner's minisign secret key; without it (CI) a
# throwaway key is generated into RELEASE_OUT and the output says so. The tools are
# built from the Go module proxy into TOOLS_DIR (hack/release/tools.sh).
# deploy/release_test.go runs it and checks what it made.
RELEASE_OUT ?= $(BIN)/release/$(VERSION)
.PHONY: release
release: deps
	VERSION=$(VERSION) IMAGE=$(IMAGE) MAKE="$(MAKE)" bash hack/release/release.sh $(RELEASE_OUT)

# A real Kubernetes cluster on this machine (hack/cluster/up.sh): control plane on the
# host, nodes w1 w2 (workers) and gw1 gw2 (gateway-capable) in their own namespaces, a
# local registry and an outside echo server. Ends by printing `export KUBECONFIG=...`.
# CLUSTER_FAMILY=ipv6 makes it IPv6-only (hack/cluster/common.sh); one cluster at a time.
CLUSTER_FAMILY ?= ipv4
export CLUSTER_FAMILY
CLUSTER_REGISTRY := $(if $(filter ipv6,$(CLUSTER_FAMILY)),egretc-registry:5000,10.77.0.1:5000)
cluster-up: deps build
	@bash hack/k8s-bins.sh etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy >/dev/null
	@bash hack/cluster/up.sh

# The image into the cluster's registry, under the name hack/cluster/overlay (overlay-ipv6) runs.
cluster-push: image
	bash hack/cluster/buildah.sh push -q --tls-verify=false $(IMAGE) docker://$(CLUSTER_REGISTRY)/egret-gw/egret:$(VERSION)

# Removes everything cluster-up made, of either family; the binaries stay in the cache.
cluster-down:
	@bash hack/cluster/down.sh

# The cluster end-to-end test (e2e/) on the IPv6-only cluster; not part of make test
# (docs/operations.md says why). Brings the cluster up and down unless one is up.
e2e-ipv6: deps tools image-stage
	CLUSTER_FAMILY=ipv6 $(GO) test -count=1 -timeout 30m -run '^TestCluster$$' -v ./e2e/

# The cluster end-to-end test on flannel (make cluster-up CLUSTER_CNI=flannel): an overlay
# CNI with its own VXLAN and a masquerade of every packet leaving the pod network. .ci/run
# runs it after make test. A cluster of another CNI that is up is taken down first.
e2e-cni: deps tools image-stage
	@bash hack/flannel.sh
	@if [ -f /var/lib/egret-cluster/family ] && [ "$$(cat /var/lib/egret-cluster/cni 2>/dev/null)" != flannel ]; then bash hack/cluster/down.sh; fi
	CLUSTER_CNI=flannel $(GO) test -count=1 -timeout 40m -run '^TestCluster$$' -v ./e2e/

clean:
	rm -rf $(BIN)
