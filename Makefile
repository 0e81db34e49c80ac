# correlator: build, test, benchmark and demo.
#
#   make demo       the whole mission: agent, runc container, two overlapping
#                   exec sessions, their audit records, attributed trees (root)
#   make demo-capture  the capture alone, one session that forks and tampers
#   make test       every test, privileged BPF and runc tests included (root)
#   make test-es    the tests that need Elasticsearch, on a real 3-node cluster
#   make generate   rebuild the committed bpf2go output from bpf/
#   make e2e-kernels  the probes and the capture suite on kernels 5.10, 6.1,
#                   6.12 (qemu, amd64 and arm64) and the host's (root)
#   make picture    redraw docs/path.svg from docs/path.dot (Graphviz)
#   make soak       the agent under a busy node's load for an hour (root):
#                   figures, samples.csv and soak.svg in soak-out/
#   make bench | fuzz | lint | build | deps | clean
#
# Privileged targets install what they need with apt-get (Debian/Ubuntu).

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
.DEFAULT_GOAL := build

# Go from the official tarball lives in /usr/local/go, often off root's PATH.
export PATH := $(PATH):/usr/local/go/bin

GO        ?= go
BIN       := bin/correlator
PKGS      ?= ./...
# go test -p: packages run one at a time. BPF tests load programs into the
# real kernel and watch every exec on the machine; a second package's execs
# would land in their benchmarks and drop counters.
TEST_P       ?= 1
TEST_TIMEOUT ?= 20m
# test/kubeapi's: its one-node cluster builds the kubelet inside the test
# (about 20 minutes on 2 cold cores).
KUBEAPI_TIMEOUT ?= 60m
TESTFLAGS    ?=
BENCH        ?= .
BENCHTIME    ?= 1s
BENCH_TIMEOUT ?= 60m
# Size of the generated audit log the ingestion benchmarks decode.
AUDIT_BENCH_MB ?= 200
FUZZTIME     ?= 30s
# The committed bpf2go output was built with Debian 12's clang 14 and
# libbpf-dev 1.1; another clang may emit different (still valid) bytes.
CLANG_MAJOR  ?= 14

# The tests' shared Elasticsearch cluster (internal/escluster): `up` starts
# three nodes or finds them up and prints their URLs, `down` removes them.
ESCLUSTER := $(GO) run ./internal/escluster/cmd/escluster

# Debian packages as package:check, where check is a command that must be on
# PATH, "static:busybox" for a statically linked binary, or "dpkg" for an
# installed package.
RUNTIME_DEPS  := runc:runc containerd:containerd busybox-static:static:busybox jq:jq curl:curl gcc:gcc libc6-dev:dpkg libseccomp-dev:dpkg maven:mvn openjdk-17-jre-headless:java
GENERATE_DEPS := clang:clang llvm:llvm-strip libbpf-dev:dpkg

IS_ROOT := $(filter 0,$(shell id -u))

# ensure_pkgs <package:check...> <strict>: install the missing packages with
# apt-get (one apt-get update first, only when something is missing). Without
# root it prints what is missing and the command to install it; strict=1
# makes that an error.
define ensure_pkgs
missing=(); \
for spec in $(1); do \
	pkg=$${spec%%:*}; check=$${spec#*:}; \
	case $$check in \
	dpkg) dpkg -s "$$pkg" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$$pkg") ;; \
	static:*) b=$$(command -v "$${check#static:}" || true); \
		if [ -z "$$b" ]; then missing+=("$$pkg"); \
		else out=$$(LC_ALL=C ldd "$$b" 2>&1 || true); \
			case $$out in *"not a dynamic executable"*|*"statically linked"*) ;; *) missing+=("$$pkg") ;; esac; fi ;; \
	*) command -v "$$check" >/dev/null 2>&1 || missing+=("$$pkg") ;; \
	esac; \
done; \
if [ $${#missing[@]} -eq 0 ]; then \
	echo "deps: present: $(foreach s,$(1),$(firstword $(subst :, ,$(s))))"; \
elif [ "$$(id -u)" = 0 ]; then \
	echo "deps: installing $${missing[*]} with apt-get"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends --no-upgrade "$${missing[@]}"; \
else \
	echo "deps: missing Debian packages: $${missing[*]}" >&2; \
	echo "deps: not root, so not installing them; run:" >&2; \
	echo "    sudo apt-get update && sudo apt-get install -y $${missing[*]}" >&2; \
	if [ "$(2)" = 1 ]; then exit 1; fi; \
fi
endef

.PHONY: all deps deps-test deps-generate generate build test test-es bench demo demo-capture lint fuzz clean docs render-config image image-docker e2e-node picture picture-check soak

all: lint build test

## deps: runc, busybox-static and jq (tests, demo), maven and a Java 17 (the
## tests' Elasticsearch, docs/testing-es.md), a kubectl >= 1.30
## (scripts/ensure-kubectl.sh builds one if PATH has none), then `go mod download`.
deps:
	@$(call ensure_pkgs,$(RUNTIME_DEPS),1)
	@GO=$(GO) bash scripts/ensure-kubectl.sh 1
	$(GO) mod download

# deps-test: like deps, but without root only warns: the unprivileged tests
# still run, and the privileged ones skip (or fail, under CI=true).
deps-test:
	@$(call ensure_pkgs,$(RUNTIME_DEPS),$(if $(IS_ROOT),1,0))
	@GO=$(GO) bash scripts/ensure-kubectl.sh $(if $(IS_ROOT),1,0)
	$(GO) mod download

## deps-generate: clang, llvm (llvm-strip) and libbpf-dev for `make generate`.
deps-generate:
	@$(call ensure_pkgs,$(GENERATE_DEPS),1)
	$(GO) mod download

## generate: rebuild pkg/capture's bpf2go output from bpf/ with the bpf2go
## pinned in go.mod: per object, <stem>_x86_bpfel.{go,o} (amd64) and
## <stem>_arm64_bpfel.{go,o} (arm64); the result must match what is
## committed. Every earlier output is removed first, so a stale name (the
## single-arch <stem>_bpfel.{go,o}) cannot linger beside the new ones.
generate: deps-generate
	@v=$$(clang -dumpversion); if [ "$${v%%.*}" != "$(CLANG_MAJOR)" ]; then \
		echo "generate: warning: clang $$v, but the committed objects come from clang $(CLANG_MAJOR) (Debian 12); expect a byte-level diff" >&2; fi
	rm -f pkg/capture/*_bpfel*.go pkg/capture/*_bpfel*.o
	$(GO) generate ./pkg/capture/...

## build: bin/correlator.
build:
	$(GO) build -o $(BIN) ./cmd/correlator

## test: every test in every package, privileged ones included, on a real
## three-node Elasticsearch brought up first (internal/escluster; about 40 s,
## the distribution fetched once with mvn) and taken down after, pass or fail
## (none when CORRELATOR_TEST_ES_URL names a cluster); then test/kubeapi (its
## own module): `kubectl correlator` through a real kube-apiserver, and the
## one-node cluster of e2e-cluster (build tag e2ecluster; it builds the
## kubelet: minutes cold, seconds cached).
test: deps-test
	@# test/kubeapi is its own module: a dependency added here and not to its
	@# go.sum fails at the end of a 50-minute run; list its packages first.
	cd test/kubeapi && $(GO) list -tags e2ecluster -deps -test ./... > /dev/null
	@if [ -z "$(IS_ROOT)" ]; then \
		echo "test: not running as root: privileged tests (BPF, runc) will SKIP;" \
			"under CI=true a skip is a FAILURE. Run: sudo make test" >&2; fi
	if [ -z "$$CORRELATOR_TEST_ES_URL" ]; then \
		trap 'rc=$$?; $(ESCLUSTER) down || true; exit $$rc' EXIT; \
		if urls=$$($(ESCLUSTER) up); then echo "test: Elasticsearch cluster at $$urls"; \
		else echo "test: no Elasticsearch cluster (above): its tests skip, or fail under CI=true" >&2; fi; \
	fi; \
	$(GO) test -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)
	cd test/kubeapi && $(GO) test -tags e2ecluster -count=1 -timeout $(KUBEAPI_TIMEOUT) $(TESTFLAGS) ./...

## soak: the real agent (BPF, runc, SQLite, the webhook, a file alert sink)
## under a busy node's load for SOAK_DURATION (default 1h; make test runs
## three minutes of it): an upgrade, a kill -9, the store's disk full, short
## retention; prints the figures and writes samples.csv, events.csv, queries.csv,
## figures.txt and soak.svg to SOAK_OUT (internal/soak, docs/benchmarks.md).
SOAK_DURATION ?= 1h
SOAK_OUT      ?= $(CURDIR)/soak-out
SOAK_TIMEOUT  ?= 3h
soak: deps-test
	@[ -n "$(IS_ROOT)" ] || { echo "soak: needs root (BPF, runc, a tmpfs for the store)" >&2; exit 1; }
	SOAK_DURATION=$(SOAK_DURATION) SOAK_OUT=$(SOAK_OUT) $(GO) test -count=1 -run '^TestSoak$$' -v \
		-timeout $(SOAK_TIMEOUT) ./internal/soak

## bench: benchmarks only, with allocations (root). BENCH=regex BENCHTIME=1s|100x.
bench: deps-test
	@if [ -z "$(IS_ROOT)" ]; then echo "bench: not root: the BPF benchmarks will skip" >&2; fi
	AUDIT_BENCH_MB=$(AUDIT_BENCH_MB) $(GO) test -count=1 -p 1 -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem -timeout $(BENCH_TIMEOUT) $(PKGS)

## test-es: only the tests that need Elasticsearch, on the shared three-node
## cluster (started when not up, and left up for the next run: `go run
## ./internal/escluster/cmd/escluster down` removes it), or on the cluster at
## CORRELATOR_TEST_ES_URL when set (CORRELATOR_TEST_ES_API_KEY optional).
## docs/testing-es.md says the rest.
# Every test of the first packages needs the cluster; of the last two, those
# the -run filter names.
ES_PKGS ?= ./internal/escluster/ ./pkg/store/elasticsearch/ ./pkg/auditlog/ship/
ES_MIXED_PKGS ?= ./pkg/cluster/ ./cmd/correlator/
ES_MIXED_RUN ?= Elasticsearch|SameRows|MetricsPage
test-es:
	@if [ -z "$$CORRELATOR_TEST_ES_URL" ]; then \
		urls=$$($(ESCLUSTER) up); echo "test-es: Elasticsearch cluster at $$urls"; \
	else echo "test-es: Elasticsearch cluster at CORRELATOR_TEST_ES_URL=$$CORRELATOR_TEST_ES_URL"; fi
	$(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(ES_PKGS)
	$(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) -run '$(ES_MIXED_RUN)' $(TESTFLAGS) $(ES_MIXED_PKGS)

## docs: regenerate docs/api.md from pkg/api/openapi.json.
docs:
	$(GO) test ./internal/apidoc -run TestAPIDocUpToDate -update

## picture: redraw docs/path.svg (the path from `kubectl exec` to the answer,
## shown atop README.md and docs/README.md) from docs/path.dot with Graphviz's
## dot, installed with apt-get when missing. The generator's version comment
## is dropped, so the same dot gives the same bytes.
PICTURE_SRC := docs/path.dot
PICTURE_SVG := docs/path.svg
PICTURE_DEPS := graphviz:dot
define draw_picture
dot -Tsvg $(PICTURE_SRC) | sed -e '/^<!-- Generated by graphviz version.*-->$$/d' -e '/^<!-- Generated by graphviz version/{N;d;}' > $(1)
endef
picture:
	@$(call ensure_pkgs,$(PICTURE_DEPS),1)
	$(call draw_picture,$(PICTURE_SVG).tmp)
	mv $(PICTURE_SVG).tmp $(PICTURE_SVG)

## picture-check: fail when the committed docs/path.svg is not what
## docs/path.dot draws (CI runs it; `make picture` fixes it).
picture-check:
	@$(call ensure_pkgs,$(PICTURE_DEPS),1)
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	$(call draw_picture,"$$tmp"); \
	if ! diff -u $(PICTURE_SVG) "$$tmp"; then \
		echo "picture-check: $(PICTURE_SVG) is stale or edited by hand: run make picture and commit it ($$(dot -V 2>&1))" >&2; exit 1; fi; \
	echo "picture-check: $(PICTURE_SVG) is what $(PICTURE_SRC) draws ($$(dot -V 2>&1))"

## render-config: the agent's config file as the Helm chart renders it (HELM_ARGS="--set ...").
render-config:
	@deploy/render-config.sh $(HELM_ARGS)

IMAGE ?= ghcr.io/execid/correlator:dev
IMAGE_ARCHIVE ?= bin/correlator.oci.tar
IMAGE_ARCHES ?= amd64 arm64
## image: correlator's image as an OCI archive, offline (no Docker, no registry):
## one image index with linux/amd64 and linux/arm64 under one reference. Import
## it with `ctr -n k8s.io images import bin/correlator.oci.tar`; push it with
## `skopeo copy --all` (docs/install.md, "Publishing the image").
image:
	GO=$(GO) IMAGE=$(IMAGE) OUT=$(IMAGE_ARCHIVE) ARCHES="$(IMAGE_ARCHES)" bash scripts/image.sh

## image-docker: the same image from the Dockerfile (needs a Docker engine).
image-docker:
	docker build -t $(IMAGE) .

## e2e-node: the containerd node harness (root): offline images, CRI pods in
## several namespaces, execs through containerd's task API as a KEP-6035
## runtime lands them, and the CRI's own exec. Also part of `make test`.
e2e-node: deps-test
	$(GO) test -count=1 -v -timeout 15m ./internal/ociimage/... ./internal/nodeharness/...

## fuzz: each Fuzz* function of each package for FUZZTIME (default 30s).
fuzz:
	@n=0; for pkg in $$($(GO) list $(PKGS)); do \
		list=$$($(GO) test -list 'Fuzz.*' "$$pkg"); \
		for f in $$(grep '^Fuzz' <<<"$$list" || true); do \
			echo "fuzz: $$pkg $$f for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
			n=$$((n+1)); \
		done; \
	done; echo "fuzz: $$n fuzz targets ran for $(FUZZTIME) each"

## demo: the whole mission (root): the agent on a temporary SQLite store, a
## runc container, two overlapping exec sessions as two users, their audit
## records by file and by webhook, and the attributed session trees.
demo: deps build
	bash scripts/demo.sh

## demo-capture: the capture alone: one session that forks and tampers, and
## the events `correlator capture` recorded for it (root).
demo-capture: deps build
	bash scripts/demo-capture.sh

## lint: gofmt and go vet.
lint:
	@out=$$(gofmt -l .); \
		if [ -n "$$out" ]; then echo "gofmt: these files need gofmt -w:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin

## e2e-kubeapi: `kubectl correlator` through a real kube-apiserver (in
## process, on embedded etcd): its pod proxy, RBAC with the shipped
## manifests, two agents on SQLite stores (test/kubeapi, its own module).
## It compiles kube-apiserver: about 8 minutes cold, seconds when cached.
## CORRELATOR_KUBEAPI_OUTPUT=dir keeps the plugin's tables for the README.
.PHONY: e2e-kubeapi
e2e-kubeapi:
	cd test/kubeapi && $(GO) test -count=1 ./...

## e2e-cluster: the whole path, real (root): a one-node cluster in one test,
## no Docker: kube-apiserver in process with both audit backends, a real
## kubelet (k8s.io/kubernetes v1.35.4's cmd/kubelet, built by the test) on
## the containerd of internal/nodeharness, correlator's chart applied
## through the API (its agent pod started by the kubelet), the exec bridge,
## users' `kubectl exec` with the real kubectl, answered by
## `kubectl correlator`; once with Debian's runc, once with runc v1.4.0.
## Alone and verbose here; `make test` runs it too (build tag e2ecluster).
.PHONY: e2e-cluster
e2e-cluster: deps-test
	cd test/kubeapi && $(GO) test -tags e2ecluster -count=1 -v -timeout 30m -run '^TestRealCluster$$' .

## e2e-kernels: the kernel matrix (root): Debian's 5.10 (bullseye), 6.1
## (bookworm) and 6.12 (trixie) booted under qemu (TCG) on the host's root
## (9p, read-only, tmpfs overlay; cgroup v2), the same three arm64 kernels
## (arm64:5.10 ...) under qemu-system-aarch64 on a root of Debian's arm64
## packages with cross-compiled tests, and this machine's kernel. In
## each: the probes loaded as `correlator capture` loads them, with the
## verifier's instruction counts per program, then the pkg/capture suite
## (its test binary, built here). KERNELS="6.1 arm64:6.12" picks kernels;
## E2E_KERNELS_RUN=regexp the tests (empty: load only);
## E2E_KERNELS_RUN_arm64_6_1=regexp one kernel's. Kernels are fetched
## with apt-get download into /var/cache/correlator-e2e-kernels (KERNEL_CACHE),
## with their own sources list and state: the machine's apt setup is untouched.
## scripts/e2e-kernels/run.sh documents the rest. Runtimes: in the guests
## (pure cgroup v2) the container tests run again with crun
## (E2E_KERNELS_CRUN_RUN), and one end-to-end attribution through `correlator
## run` with runc and crun (E2E_KERNELS_E2E_RUN); empty: none. The guests
## run as many at once as the machine has CPUs (E2E_KERNELS_JOBS=1: one at
## a time), the host's kernel after them.
KERNELS          ?= 5.10 6.1 6.12 arm64:5.10 arm64:6.1 arm64:6.12 host
E2E_KERNELS_RUN  ?= .
E2E_KERNELS_DEPS := qemu-system-x86:qemu-system-x86_64 busybox-static:static:busybox kmod:depmod xz-utils:xz cpio:cpio crun:crun
# arm64 kernels: qemu-system-aarch64, and the cross compiler for the forger.
E2E_KERNELS_ARM64_DEPS := qemu-system-arm:qemu-system-aarch64 gcc-aarch64-linux-gnu:aarch64-linux-gnu-gcc libc6-dev-arm64-cross:dpkg
# e2e_kernels_pass VAR: VAR='<its value, unexpanded>' when VAR is set, so
# that unset keeps run.sh's default and empty means none.
e2e_kernels_pass = $(if $(filter undefined,$(origin $(1))),,$(1)='$(value $(1))')
# e2e_kernels_cmdline: the other E2E_KERNELS_* given on make's command line
# (per kernel: E2E_KERNELS_RUN_arm64_6_1=...), unexpanded, as make would
# expand a regexp's $ in exporting them.
e2e_kernels_cmdline = $(foreach v,$(sort $(filter-out E2E_KERNELS_RUN E2E_KERNELS_CRUN_RUN E2E_KERNELS_E2E_RUN,$(filter E2E_KERNELS_%,$(.VARIABLES)))),$(if $(filter command line,$(origin $(v))),$(v)='$(value $(v))'))
.PHONY: e2e-kernels
e2e-kernels:
	@$(call ensure_pkgs,$(RUNTIME_DEPS) $(E2E_KERNELS_DEPS) $(if $(filter arm64:%,$(KERNELS)),$(E2E_KERNELS_ARM64_DEPS)),1)
	KERNELS='$(KERNELS)' E2E_KERNELS_RUN='$(value E2E_KERNELS_RUN)' GO='$(GO)' \
	$(call e2e_kernels_pass,E2E_KERNELS_CRUN_RUN) $(call e2e_kernels_pass,E2E_KERNELS_E2E_RUN) \
	$(e2e_kernels_cmdline) bash scripts/e2e-kernels/run.sh
