# gpuprobe build. `make help` lists the targets.
#
# Everything is incremental: Go's build cache does the fine-grained work, and
# the rules below only re-run a step when its inputs changed (Go sources,
# go.mod/go.sum, builder-config*.yaml). Heavy third-party builds (ocb, Jaeger,
# Prometheus) are cached by version under $(GPUPROBE_CACHE).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := all

GO ?= go
GOFLAGS_BUILD ?= -buildvcs=false -trimpath
GPUPROBE_CACHE ?= $(HOME)/.cache/gpuprobe
export GPUPROBE_CACHE

# Pinned tool and backend versions (see docs/development.md, "Pinned versions").
OCB_VERSION ?= v0.161.0
JAEGER_VERSION ?= v1.76.0
PROMETHEUS_VERSION ?= v0.315.0
# The API server that deploy-dryrun admits the manifests on (Kubernetes
# v1.34.4 from k8s.io/kubernetes, with the published staging modules), and
# its etcd.
KUBE_VERSION ?= v1.34.4
ETCD_VERSION ?= v3.6.16

OCB_DIR ?= $(CURDIR)/.cache/bin
OCB := $(OCB_DIR)/ocb-$(OCB_VERSION)
# The collector is a static binary by default so that it runs unchanged on
# the GPU machine; set OTELCOL_CGO=1 if a component needs cgo.
OTELCOL_CGO ?= 0
# Without the symbol and DWARF tables (as the collector's releases ship):
# the distribution with the Kubernetes processors is 156 MiB otherwise,
# and the GPU bundle must stay under the device tool's 64 MiB.
OTELCOL_LDFLAGS ?= -s -w
JAEGER_BIN := $(GPUPROBE_CACHE)/backends/jaeger-$(JAEGER_VERSION)
PROMETHEUS_BIN := $(GPUPROBE_CACHE)/backends/prometheus-$(PROMETHEUS_VERSION)
KUBE_APISERVER_BIN := $(GPUPROBE_CACHE)/backends/kube-apiserver-$(KUBE_VERSION)
ETCD_BIN := $(GPUPROBE_CACHE)/backends/etcd-$(ETCD_VERSION)

# Tests: -race where affordable (set RACE= to turn it off on a slow machine).
RACE ?= -race
TEST_TIMEOUT ?= 30m
E2E_TIMEOUT ?= 30m
# The adversarial suite takes about 2 minutes (7 classes of 5 s, each on a
# fresh collector); the timeout only catches a hang.
ADVERSARIAL_TIMEOUT ?= 6m
BENCH ?= .
BENCHTIME ?= 1s
BENCHCOUNT ?= 1
FUZZTIME ?= 30s

# Every Go source of the main module (nested modules such as the generated
# collector under build/ and tool caches are left out).
GO_SRCS := $(shell find . -name '*.go' -not -path './build/*' -not -path './.cache/*' -not -path './.dev/*' 2>/dev/null)
GO_BUILD_SRCS := $(filter-out %_test.go ./e2e/% ./deploy/%,$(GO_SRCS))
GO_PKGS = $(shell $(GO) list ./... | grep -v -e '/e2e$$' -e '/e2e/adversarial$$' -e '/e2e/loadtest$$')

# testdata/bpf/bpf.mk (written with the ELF loader) adds the clang-built eBPF
# objects: it defines BPF_OBJECTS and the rules that build them.
BPF_OBJECTS :=
-include testdata/bpf/bpf.mk

.PHONY: all build generate ocb otelcol run test fmt-check vet cross unit e2e adversarial backends \
	gpu-test gpu-bundle loadtest loadtest-short bench fuzz install clean distclean help deploy-check deploy-dryrun image image-push

all: build ## build every package, bin/gpuprobe, bin/gpuprobe-harness and the testdata eBPF objects

build: bin/gpuprobe bin/gpuprobe-harness $(BPF_OBJECTS) ## same as all
	$(GO) build $(GOFLAGS_BUILD) ./...

# eBPF objects embedded with go:embed (the built-in GPU probes, the host
# probes' bpf2go output): a rebuilt object must rebuild the binaries.
GO_EMBEDS := $(wildcard gpuprobe/probes/*.o gpuprobe/hostprobe/*_bpfel.o)
# They are committed (go generate rebuilds them): never remake them with
# make's built-in %.o: %.c rule when a checkout leaves the .c newer.
$(GO_EMBEDS): ;

bin/gpuprobe: $(GO_BUILD_SRCS) $(GO_EMBEDS) go.mod go.sum
	@mkdir -p bin
	$(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpuprobe

# The test harness (agent-dump, tracecheck, loadgen): run by the GPU checks
# in scripts/ and by the e2e tests, not part of the user tools.
bin/gpuprobe-harness: $(GO_BUILD_SRCS) $(GO_EMBEDS) go.mod go.sum
	@mkdir -p bin
	$(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpuprobe-harness

# The in-application shim (bin/libgpuprobe.so) and its test binary.
-include shim/shim.mk
# The per-node hardware-counter sampler (bin/gpuprobe-counters).
-include counters/counters.mk

# The cgo GPU check binary (run on the GPU machine by the gpu-* scripts).
bin/gpuprobe-gpucheck: $(GO_BUILD_SRCS) $(GO_EMBEDS) go.mod go.sum
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpuprobe-gpucheck

# The jit/ptx tests that need a GPU (build tag gpu), as a test binary for
# the GPU machine, which has no Go (gpu-test.sh PARTS=gpuhash).
bin/ptx-gpu.test: $(GO_BUILD_SRCS) go.mod go.sum
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) test -c -tags gpu -o $@ ./jit/ptx/

generate: ## regenerate mdatagen code and the host probes' bpf2go bindings
	$(GO) generate ./gpuprobe/hostprobe
	@if [[ -f receiver/metadata.yaml ]]; then \
		$(GO) tool mdatagen receiver/metadata.yaml; \
	else \
		echo "generate: receiver/metadata.yaml does not exist yet, nothing to do"; \
	fi

# The user tools: gpuprobe with the shim beside it (where `gpuprobe run`
# looks for it), the GPU programs' header and the shim's application API
# (gpuprobe_shim.h), for -I $(PREFIX)/include/gpuprobe.
PREFIX ?= /usr/local
install: bin/gpuprobe bin/libgpuprobe.so ## install gpuprobe, the shim and gpuprobe.h under $(DESTDIR)$(PREFIX)
	install -D -m 755 bin/gpuprobe $(DESTDIR)$(PREFIX)/bin/gpuprobe
	install -D -m 755 bin/libgpuprobe.so $(DESTDIR)$(PREFIX)/bin/libgpuprobe.so
	install -D -m 644 jit/include/gpuprobe.h $(DESTDIR)$(PREFIX)/include/gpuprobe/gpuprobe.h
	install -D -m 644 shim/include/gpuprobe_shim.h $(DESTDIR)$(PREFIX)/include/gpuprobe/gpuprobe_shim.h

# ---- the collector distribution (ocb) ------------------------------------

ocb: $(OCB) ## install ocb $(OCB_VERSION) (cached in OCB_DIR)

$(OCB):
	@mkdir -p $(OCB_DIR)
	GOBIN=$(OCB_DIR) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)
	mv $(OCB_DIR)/builder $@

# Two distributions from one receiver: the full one (builder-config.yaml,
# bin/otelcol-gpuprobe: the image, the Kubernetes checks, e2e and the GPU
# machine) and the lean one (builder-config-lean.yaml,
# bin/otelcol-gpuprobe-lean: no cloud or Kubernetes components, for
# `make run`, the adversarial suite and the load test; minutes to build
# on a cold machine instead of about 20).
#
# otelcol-dist NAME,MANIFEST: ocb generates build/NAME's sources from
# MANIFEST and tidies their go.mod; compilation is ours so that a source
# change only costs an incremental `go build`.
define otelcol-dist
build/$(1)/components.go: $(2) go.mod go.sum | $$(OCB)
	@mkdir -p build
	$$(OCB) --config $(2) --skip-compilation
	@touch $$@

bin/$(1): build/$(1)/components.go $$(GO_BUILD_SRCS) $$(GO_EMBEDS) go.mod go.sum
	@mkdir -p bin
	cd build/$(1) && CGO_ENABLED=$$(OTELCOL_CGO) $$(GO) build $$(GOFLAGS_BUILD) -ldflags '$$(OTELCOL_LDFLAGS)' -mod=mod -o $$(CURDIR)/$$@ .
endef
$(eval $(call otelcol-dist,otelcol-gpuprobe,builder-config.yaml))
$(eval $(call otelcol-dist,otelcol-gpuprobe-lean,builder-config-lean.yaml))

otelcol: bin/otelcol-gpuprobe ## build the full collector distribution bin/otelcol-gpuprobe (Kubernetes, image) with ocb
.PHONY: otelcol-lean
otelcol-lean: bin/otelcol-gpuprobe-lean ## build the lean collector bin/otelcol-gpuprobe-lean (no cloud/Kubernetes components) with ocb

run: bin/otelcol-gpuprobe-lean ## build the lean collector and start it with testdata/config.yaml (no clang needed)
	bin/otelcol-gpuprobe-lean --config testdata/config.yaml

# ---- tests -----------------------------------------------------------------

test: fmt-check vet cross unit deploy-check deploy-dryrun e2e adversarial loadtest-short ## everything CI runs

cross: ## every package builds for linux/arm64 without cgo (GH200, GB200 nodes)
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) ./...

fmt-check: ## fail if any Go file is not gofmt-formatted
	@out=$$(gofmt -l $(GO_SRCS)); \
	if [[ -n "$$out" ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

unit: build ## unit tests of every package (not e2e)
	$(GO) test $(RACE) -timeout $(TEST_TIMEOUT) $(GO_PKGS)

# deploy/ is a module of its own (Helm and go-containerregistry stay out of
# the collector's build): its tests render the Helm chart with Helm's
# engine, check the manifests, and have the collector validate their
# configuration. See docs/kubernetes.md.
deploy-check: bin/otelcol-gpuprobe build/gpuprobe-image.tar ## Kubernetes manifests, Helm chart and image checks (no cluster)
	cd deploy && $(GO) vet ./...
	cd deploy && GPUPROBE_OTELCOL=$(CURDIR)/bin/otelcol-gpuprobe GPUPROBE_IMAGE=$(CURDIR)/build/gpuprobe-image.tar \
		$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

# The container image, without a Docker daemon: a `docker save` tarball of
# the collector, a static gpuprobe and the shim (deploy/image). Load it with
# docker load, podman load, ctr -n k8s.io images import or kind load
# image-archive; push it with make image-push. The manifests and the chart
# name the default reference (deploy/kit_test.go checks it).
REGISTRY ?= ghcr.io/gpuprobe
IMAGE_VERSION ?= 0.1.0-dev
IMAGE_TAG ?= $(REGISTRY)/gpuprobe:$(IMAGE_VERSION)
image: build/gpuprobe-image.tar ## the container image as build/gpuprobe-image.tar (IMAGE_TAG)

build/image/gpuprobe: $(GO_BUILD_SRCS) $(GO_EMBEDS) go.mod go.sum
	@mkdir -p build/image
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/gpuprobe

build/gpuprobe-image.tar: bin/otelcol-gpuprobe bin/libgpuprobe.so build/image/gpuprobe deploy/kubernetes/config.yaml $(wildcard deploy/image/*.go deploy/cmd/*/*.go) deploy/go.mod
	ln -sf $(CURDIR)/bin/otelcol-gpuprobe $(CURDIR)/bin/libgpuprobe.so build/image/
	cd deploy && $(GO) run ./cmd/gpuprobe-image -bin ../build/image -config kubernetes/config.yaml \
		-tag $(IMAGE_TAG) -o ../$@

# crane (go-containerregistry, a tool of deploy/go.mod) pushes the tarball
# with the credentials of ~/.docker/config.json (crane auth login, docker
# login or podman login write them); no daemon is needed.
image-push: build/gpuprobe-image.tar ## push the image to $(IMAGE_TAG) (make image-push REGISTRY=registry.example.com/team)
	cd deploy && $(GO) tool crane push ../build/gpuprobe-image.tar $(IMAGE_TAG)

backends: $(JAEGER_BIN) $(PROMETHEUS_BIN) $(ETCD_BIN) $(KUBE_APISERVER_BIN) ## build (or reuse) Jaeger, Prometheus, etcd and kube-apiserver

$(JAEGER_BIN):
	scripts/build-backend.sh jaeger $(JAEGER_VERSION)

$(PROMETHEUS_BIN):
	scripts/build-backend.sh prometheus $(PROMETHEUS_VERSION)

$(ETCD_BIN):
	scripts/build-backend.sh etcd $(ETCD_VERSION)

$(KUBE_APISERVER_BIN):
	scripts/build-backend.sh kube-apiserver $(KUBE_VERSION)

# Server-side dry-run of every manifest and of the chart's objects on a
# real kube-apiserver and etcd started on loopback ports (deploy/dryrun_test.go),
# and k8s_attributes associating a pod on container.id through that API
# server (deploy/association_test.go).
deploy-dryrun: $(ETCD_BIN) $(KUBE_APISERVER_BIN) ## admit the manifests and the chart on a real kube-apiserver (dry run)
	cd deploy && GPUPROBE_KUBE_APISERVER=$(KUBE_APISERVER_BIN) GPUPROBE_ETCD=$(ETCD_BIN) \
		$(GO) test -count=1 -v -run 'TestServerDryRun|TestPodAssociationOnContainerID' -timeout 5m .

e2e: bin/gpuprobe-harness bin/otelcol-gpuprobe bin/libgpuprobe.so backends ## end-to-end test against real Jaeger and Prometheus
	GPUPROBE_OTELCOL=$(CURDIR)/bin/otelcol-gpuprobe \
	GPUPROBE_HARNESS=$(CURDIR)/bin/gpuprobe-harness \
	GPUPROBE_SHIM=$(CURDIR)/bin/libgpuprobe.so \
	GPUPROBE_JAEGER=$(JAEGER_BIN) \
	GPUPROBE_PROMETHEUS=$(PROMETHEUS_BIN) \
	$(GO) test -count=1 -v -timeout $(E2E_TIMEOUT) ./e2e/

# Hostile agent clients against the real collector binary (as root: one
# class runs as an unprivileged uid). See e2e/adversarial/doc.go.
adversarial: bin/gpuprobe-harness bin/otelcol-gpuprobe-lean ## hostile clients against the lean collector (root, ~2 min)
	GPUPROBE_OTELCOL=$(CURDIR)/bin/otelcol-gpuprobe-lean \
	GPUPROBE_HARNESS=$(CURDIR)/bin/gpuprobe-harness \
	$(GO) test -count=1 -v -timeout $(ADVERSARIAL_TIMEOUT) ./e2e/adversarial/

# The collector under load from gpuprobe-harness loadgen clients
# (e2e/loadtest): CPU per million launches, VmHWM, launches accounted,
# SIGTERM time. The short form runs in `make test`; the long form is
# LOADTEST_CLIENTS clients × LOADTEST_LAUNCHES at LOADTEST_RATE each (60 s
# at 1,000,000 launches a second in total; LOADTEST_RATE=0: as fast as
# the clients can).
LOADTEST_CLIENTS ?= 64
LOADTEST_LAUNCHES ?= 937500
LOADTEST_RATE ?= 15625
LOADTEST_ENV = GPUPROBE_OTELCOL=$(CURDIR)/bin/otelcol-gpuprobe-lean GPUPROBE_HARNESS=$(CURDIR)/bin/gpuprobe-harness

loadtest: bin/gpuprobe-harness bin/otelcol-gpuprobe-lean ## the long load benchmark (64 clients; LOADTEST_* set the load)
	$(LOADTEST_ENV) LOADTEST_CLIENTS=$(LOADTEST_CLIENTS) LOADTEST_LAUNCHES=$(LOADTEST_LAUNCHES) LOADTEST_RATE=$(LOADTEST_RATE) \
		$(GO) test -count=1 -v -timeout 30m ./e2e/loadtest/

loadtest-short: bin/gpuprobe-harness bin/otelcol-gpuprobe-lean ## the load test's short form (8 clients, a few seconds)
	$(LOADTEST_ENV) $(GO) test -count=1 -v -timeout 2m ./e2e/loadtest/

# ---- GPU machine -----------------------------------------------------------

# Runs on the GPU machine without Go, from the prebuilt binaries in bin/.
gpu-test: ## every GPU check from prebuilt bin/ (no Go needed); PARTS=samples,bench,... selects parts; DRY_RUN=1 checks files only
	bash scripts/gpu-test.sh

# Everything gpu-test needs, in one archive to carry to the GPU machine.
gpu-bundle: bin/gpuprobe bin/gpuprobe-harness bin/otelcol-gpuprobe bin/libgpuprobe.so bin/libgpuprobe-selftime.so bin/gpuprobe-gpucheck bin/ptx-gpu.test $(BPF_OBJECTS) ## build/gpu-bundle.tar.gz for the GPU machine
	bash scripts/gpu-bundle.sh build/gpu-bundle.tar.gz

# ---- performance and fuzzing ------------------------------------------------

bench: ## Go benchmarks (BENCH, BENCHTIME, BENCHCOUNT)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(BENCHCOUNT) -benchmem $(GO_PKGS)

fuzz: ## every fuzz target for FUZZTIME each
	bash scripts/fuzz.sh $(FUZZTIME)

clean: ## remove build outputs (keeps the ocb and backend caches)
	rm -rf bin build
	rm -f $(BPF_OBJECTS)

distclean: clean ## also remove the project-local tool cache
	rm -rf .cache

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort
