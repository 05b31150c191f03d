# Every target bootstraps .venv itself: on a fresh machine `make demo` and
# `make test` are the only commands a user types. The venv is rebuilt only
# when pyproject.toml changes (the stamp file records the last install).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench proto readme clean cluster-bins yurthub-bin yurt-manager-bin akri-peer tpm-tools prometheus-bin

# The real Kubernetes parts of the test bed (etcd, kube-apiserver, controller-manager,
# scheduler, kubemark, kubectl), built from tests/cluster/go.mod into
# ~/.cache/edgehub/k8s-<version>/ once per machine and pin (afterwards this is a no-op), the
# tests' client-go informer beside them (per pin and source), and Helm from
# tests/cluster/helm/go.mod. How long each first build takes, measured: docs/testbed.md
# ("The first build"), the one place that says it.
K8S_BIN = $(shell $(PYTHON) tests/cluster/build.py --print-dir)

# pip prints what it fetches and installs as it goes (a first install takes about a minute);
# the build backend prints nothing (tests/unit/test_packaging_build.py).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "== creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "== updating pip in $(VENV)"
	@$(BIN)/python -m pip install --quiet --upgrade --disable-pip-version-check pip
	@echo "== installing edgehub (editable) and its test tools into $(VENV)"
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[test]'
	@touch $@

demo: $(STAMP)
	$(BIN)/edgehub demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy yurthub kubecontrol discovery managers nodeautonomy inputbounds cmd/edgehub
	$(BIN)/lint-imports

cluster-bins:
	$(PYTHON) tests/cluster/build.py

# The Akri test peer (tests/akripeer: Akri's gRPC stack, tonic 0.13 over h2 0.4), pinned by its
# Cargo.lock, built from crates.io into ~/.cache/edgehub/akripeer-target so rebuilds are
# incremental across clones (its first build: docs/testbed.md). The tests find it
# through EDGEHUB_AKRI_PEER.
AKRI_PEER_TARGET ?= $(HOME)/.cache/edgehub/akripeer-target
AKRI_PEER := $(AKRI_PEER_TARGET)/release/akripeer

akri-peer:
	@command -v cargo >/dev/null 2>&1 || { echo "make akri-peer: cargo not found; install Rust (https://rustup.rs) to build the Akri test peer in tests/akripeer" >&2; exit 1; }
	CARGO_TARGET_DIR=$(AKRI_PEER_TARGET) cargo build --release --locked --quiet --manifest-path tests/akripeer/Cargo.toml

# OpenYurt's YurtHub (bench/yurthub/go.mod pins it), for bench/side_by_side.py: built into
# ~/.cache/edgehub/yurthub-<version>/ once per pin (its first build: docs/testbed.md).
yurthub-bin:
	$(PYTHON) bench/yurthub/build.py

# OpenYurt's yurt-manager from the same OpenYurt pin (bench/yurtmanager/go.mod, checked equal to
# bench/yurthub's), for bench/manager_scale.py: built beside YurtHub in
# ~/.cache/edgehub/yurthub-<version>/ once per pin (its first build: docs/testbed.md).
yurt-manager-bin:
	$(PYTHON) bench/yurtmanager/build.py

# swtpm and tpm2-tools (Debian's packages) for the TPM-sealed cache tests: installed once per
# machine when missing (CI runs as root on a fresh machine); a no-op where they are present.
tpm-tools:
	@command -v swtpm >/dev/null && command -v tpm2_unseal >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "need swtpm and tpm2-tools" >&2; exit 1; }; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    swtpm swtpm-tools tpm2-tools; }

# Prometheus (Debian's package) for tests/e2e/cluster/test_prometheus_real.py, which starts its
# own server on loopback with a temporary config and storage (never the Debian service).
prometheus-bin:
	@command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus && \
	    { ! command -v systemctl >/dev/null 2>&1 || systemctl disable --now prometheus >/dev/null 2>&1 || true; }; \
	  else \
	    echo "make prometheus-bin: prometheus not found; install it (Debian: apt-get install prometheus) for tests/e2e/cluster/test_prometheus_real.py" >&2; exit 1; \
	  fi; }

# Two pytest workers: the real-cluster tests (one control plane, mostly waiting on kubelet's
# cadence) run on one of them in turn, everything else is shared out (tests/conftest.py).
test: lint cluster-bins yurthub-bin akri-peer tpm-tools prometheus-bin
	EDGEHUB_AKRI_PEER=$(AKRI_PEER) EDGEHUB_K8S_BIN=$(K8S_BIN) EDGEHUB_KUBECTL=$(K8S_BIN)/kubectl $(BIN)/python -m pytest -q -p no:cacheprovider -n 2

# bench/fleet.py runs --quick here (6 nodes); its default is 30 nodes (how long each takes:
# docs/fleet.md).
bench: $(STAMP) cluster-bins yurthub-bin yurt-manager-bin
	@for b in bench/*.py; do echo "== $$b"; args=""; [ $$b = bench/fleet.py ] && args=--quick; \
	  $(BIN)/python $$b $$args || exit 1; done

# Regenerate the committed gRPC stubs from discovery/proto/*.proto, and the Kubernetes API
# descriptors + Go JSON facts of yurthub/kubeproto from the pinned k8s.io modules (needs Go and
# the module cache of tests/cluster: cd tests/cluster && go mod download).
proto: $(STAMP)
	$(BIN)/python -m discovery.proto.generate
	$(BIN)/python -m yurthub.kubeproto.generate

# Regenerate the CLI reference (docs/cli.md) from the commands' own --help.
readme: $(STAMP)
	$(BIN)/python -m edgehub.clidoc

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
