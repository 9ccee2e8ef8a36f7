# ssekd: the two commands are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= etc/zilla.yaml
# Two installs, each made again whenever pyproject.toml or constraints.txt changes: `make run`
# installs what the daemon and the demo need (the `demo` extra: the development broker); `make
# test`, `make bench` and `make setup` everything the tests and benchmarks drive besides (Spark,
# the baseline bridge, the linters), about ten times as much. Both install exactly the versions
# of constraints.txt (a pip constraints file: every package of ssekd and its extras, as tested;
# the container image installs with it too); `make lock` resolves it again from pyproject.toml.
CONSTRAINTS := constraints.txt
SUM        := $(shell cat pyproject.toml $(CONSTRAINTS) | cksum | cut -d' ' -f1)
RUN_STAMP  := $(VENV)/.installed-run-$(SUM)
STAMP      := $(VENV)/.installed-full-$(SUM)
FULL_EXTRAS := dev,spark,bench,compile
RUN_EXTRAS  := demo,compile
# The hot path's compiled twin (ssekd/hotpath/build.py), built beside its source whenever that
# changes: the editable install reaches the checkout, so a wheel's build would not do. Without
# Cython or a C compiler it prints one line and the daemon runs the same code as plain Python.
HOTPATH := $(VENV)/.hotpath-built
# What builds and runs the container image (`make image` installs these alone).
IMAGE_DEBS := podman runc debootstrap
# Debian programs the tests and benchmarks drive as real clients (and nginx, the real upstream
# of the http.proxy and http.json.schema examples), and the image's; certutil (libnss3-tools) makes the browser trust
# the test CA; protoc (protobuf-compiler) encodes Protobuf bodies as the http.kafka.proto.oneway
# example's test.sh does; perf (linux-perf) counts the fan-out benchmark's send syscalls.
DEBS   := curl openssl wrk nghttp2-client nginx chromium default-jre-headless prometheus haproxy systemd \
          protobuf-compiler linux-perf \
          libnss3-tools $(IMAGE_DEBS)
PYTEST_ARGS ?=
# The official AsyncAPI JSON Schemas (npm `@asyncapi/specs`), which the generated AsyncAPI
# documents are validated against in the tests. Kept inside the venv folder (ignored, cleaned).
ASYNCAPI_SPECS_VERSION := 6.11.1
NODE_DIR      := $(VENV)/node
ASYNCAPI_SPECS := $(NODE_DIR)/node_modules/@asyncapi/specs/schemas/3.0.0.json
# esbuild (npm) minifies the browser client (www/ssekd-client/) for `make client-size`.
ESBUILD_VERSION := 0.28.2
ESBUILD        := $(NODE_DIR)/node_modules/.bin/esbuild

# `make image`: the container image (Containerfile) as $(IMAGE), from a base made of Debian
# packages and the wheels of constraints.txt (deploy/container/build-image.sh says why). Needs
# root for debootstrap. These podman flags are what these machines need (runc, no systemd).
IMAGE  ?= localhost/ssekd:latest
PODMAN ?= podman --runtime runc --cgroup-manager cgroupfs --events-backend file

# `make test-compat`: the same suite in a second venv on the oldest Twisted pyproject.toml allows
# (its `twisted[...]>=` floor, read from there so the two cannot disagree).
COMPAT        := .venv-compat
TWISTED_FLOOR := $(shell sed -n 's/.*"twisted\[[a-z0-9,]*\]>=\([0-9.]*\).*/\1/p' pyproject.toml)
COMPAT_STAMP  := $(COMPAT)/.installed-$(SUM)

.PHONY: run test test-compat bench setup lock image image-deps system-deps asyncapi-specs check lint \
        client-size \
        docs clean

# An editable install of the checkout with the extras $(2) into the venv whose python is $(1),
# with the constraints file $(3).
# The installer is uv (from PyPI, at UV_VERSION, put in the venv by its own pip): it fetches and
# unpacks in parallel: `make run`'s install with empty caches took 11 s with pip, 8 s with uv, of
# which 3 install uv itself and 2 compile (bench/README.md, `python -m bench.first_event --cold`).
# Where uv cannot be had, pip does the same install: both install
# exactly the versions of the constraints file, the wheel build's setuptools too.
# twistd finds plugins in the folders on sys.path (twisted/plugins/ssekd_plugin.py is in this
# one), while setuptools' editable install reaches the packages through an import hook, so the
# checkout goes on sys.path by a .pth file of our own: what the deprecated `editable_mode=compat`
# did, without its deprecation notice. setuptools also prints a notice block on every editable
# install ("Editable installation ... be careful with folders"): filtered out by its text. The
# venv's own pip is kept (PEP 660 editable installs need pip 21.3): upgrading it cost `make run`
# seconds, and its "new release" notice is turned off. uv compiles every module as it installs
# (in parallel: 2 s more for `make run`) and so does compileall for ssekd's own: a Python that
# writes no bytecode itself (PYTHONDONTWRITEBYTECODE, set on some machines) would otherwise
# compile them all again at every start (`ssekd check` took 1.3 s instead of 0.7, 4 to 6 s on a
# loaded machine). pip compiles one by one, which took half of its install: it leaves them to
# the first import (--no-compile).
UV_VERSION := 0.13.9
define install
	if $(1) -m pip install -q --disable-pip-version-check 'uv==$(UV_VERSION)' >/dev/null 2>&1 \
	    && "$$(dirname $(1))/uv" --version >/dev/null 2>&1; then \
	  "$$(dirname $(1))/uv" pip install -q --python $(1) --compile-bytecode -e '.[$(2)]' \
	    -c $(3) --build-constraint $(3) && $(1) -m compileall -q -j0 ssekd twisted; \
	else \
	  echo "uv could not be installed: installing with pip"; \
	  PYTHONWARNINGS='ignore:Editable installation' $(1) -m pip install -q --no-compile \
	    --disable-pip-version-check -e '.[$(2)]' -c $(3); \
	fi
	echo '$(CURDIR)' > "$$($(1) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/ssekd-checkout.pth"
endef

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(call install,$(BIN)/python,$(RUN_EXTRAS),$(CONSTRAINTS))
	rm -f $(VENV)/.installed-run-*
	touch $@

# The full install includes the run install: both stamps are set.
$(STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(call install,$(BIN)/python,$(FULL_EXTRAS),$(CONSTRAINTS))
	rm -f $(VENV)/.installed-*
	touch $@ $(RUN_STAMP)

setup: $(STAMP) $(HOTPATH)

# Listed after the install it needs (Cython) wherever it is a prerequisite.
$(HOTPATH): ssekd/hotpath/kernels.py ssekd/hotpath/build.py | $(BIN)/python
	$(BIN)/python ssekd/hotpath/build.py
	touch $@

# A fresh resolution of pyproject.toml (every extra, and the wheel build's own setuptools and
# wheel) into constraints.txt. Run it to take newer releases, then `make test`.
lock:
	rm -rf build/lock
	$(PYTHON) -m venv build/lock
	build/lock/bin/python -m pip install -q --upgrade pip
	build/lock/bin/python -m pip install -q '.[demo,$(FULL_EXTRAS)]' 'setuptools>=77' wheel
	{ echo "# pip constraints: every package of ssekd and its extras at the versions tested."; \
	  echo "# Used by make setup and the container image; regenerate with make lock."; \
	  build/lock/bin/python -m pip freeze --all --exclude ssekd --exclude pip; } > $(CONSTRAINTS)
	rm -rf build/lock

# The Debian packages $(1) that are missing, installed (apt-get, as root or with sudo).
define debian_packages
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi
endef

system-deps:
	$(call debian_packages,$(DEBS))

image-deps:
	$(call debian_packages,$(IMAGE_DEBS))

# npm comes with Node.js from nodejs.org/NodeSource, and is Debian's own `npm` package otherwise.
asyncapi-specs: $(ASYNCAPI_SPECS)

$(ASYNCAPI_SPECS):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Debian package: npm"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends npm; }
	npm install --no-audit --no-fund --silent --prefix $(NODE_DIR) \
	  @asyncapi/specs@$(ASYNCAPI_SPECS_VERSION)
	test -f $@

$(ESBUILD): $(ASYNCAPI_SPECS)
	npm install --no-audit --no-fund --silent --prefix $(NODE_DIR) esbuild@$(ESBUILD_VERSION)
	test -x $@

# The browser client's size, minified and gzipped (bench/results/client_size.json).
client-size: setup $(ESBUILD)
	ESBUILD=$(ESBUILD) $(BIN)/python -m bench.client_size

# Serve etc/zilla.yaml in the foreground: dev TLS key, dev broker and demo producer as needed.
run: $(RUN_STAMP) $(HOTPATH)
	$(BIN)/python -m ssekd.dev --dev-broker --dev-tokens --config $(CONFIG)

# Three processes on two cores: most tests wait on sockets, brokers and subprocesses, so a third
# fills the cores while two wait (measured on a clean clone of one commit, 2 cores: 986 s with
# two processes, 865 s with three; the CPU was still 35 % idle with two, 15 % with three). Each
# test file stays in one process (--dist loadfile): its module fixtures (a daemon, a topic) are
# made once. Files are handed out in the order collected (--no-loadscope-reorder; xdist would
# hand out the files with the most tests first), which puts the few that take minutes first
# (tests/conftest.py, LONG_FIRST), so the processes end together. The files of tests/spark/ are
# one unit, so one process starts a local Spark session, not each (tests/support/scheduling.py).
# PYTEST_PROCS=0 runs it in this process alone.
PYTEST_PROCS ?= 3

test: setup system-deps asyncapi-specs
	@started=$$(date +%s); \
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m pytest -q \
	  $(if $(filter 0,$(PYTEST_PROCS)),,-n $(PYTEST_PROCS) --dist loadfile --no-loadscope-reorder) \
	  $(PYTEST_ARGS); \
	status=$$?; echo "make test: $$(( $$(date +%s) - started )) s"; exit $$status

$(COMPAT)/bin/python:
	$(PYTHON) -m venv $(COMPAT)

$(COMPAT_STAMP): pyproject.toml $(CONSTRAINTS) | $(COMPAT)/bin/python
	@test -n "$(TWISTED_FLOOR)" || { echo "no twisted>= floor found in pyproject.toml"; exit 1; }
	# Twisted at its floor, everything else at the versions of the lock, as in `make test`
	{ grep -v -i '^twisted==' $(CONSTRAINTS); echo 'twisted==$(TWISTED_FLOOR)'; } \
	  > $(COMPAT)/constraints.txt
	$(call install,$(COMPAT)/bin/python,$(FULL_EXTRAS),$(COMPAT)/constraints.txt)
	rm -f $(COMPAT)/.installed-*
	touch $@

# Twisted is pinned to the floor; everything else resolves as in `make test`. The spark-marked
# tests are left out (the ssekd/spark/ jobs do not use Twisted), except test_serving: it serves the
# jobs' output through the daemon. A -k expression matches markers and names alike, which lets
# one run drop the marker but keep that file (-m alone cannot).
test-compat: $(COMPAT_STAMP) system-deps asyncapi-specs
	@$(COMPAT)/bin/python -c 'import twisted; print("Twisted", twisted.__version__)'
	$(COMPAT)/bin/python ssekd/hotpath/build.py
	SPARK_LOCAL_IP=127.0.0.1 $(COMPAT)/bin/python -m pytest -q -p no:cacheprovider \
	  -k 'not spark or test_serving' $(PYTEST_ARGS)

# `make bench`: the quick versions (fan-out beside the baseline bridge, jwt guard, workers; a few
# minutes); `make bench FULL=1`: every benchmark in full (fan-out to 10,000 clients, 1M-record
# topic, 50,000 idle streams, ...).
bench: setup system-deps
	FULL=$(FULL) $(BIN)/python -m bench.run $(if $(FULL),,--quick)

# The image needs podman, runc and debootstrap, and the venv's pip to download the wheels: not
# the test programs nor the daemon's install.
image: image-deps | $(BIN)/python
	PODMAN="$(PODMAN)" PIP=$(BIN)/pip deploy/container/build-image.sh $(IMAGE)

check: $(RUN_STAMP) $(HOTPATH)
	$(BIN)/ssekd check --config $(CONFIG)

# docs/config-reference.md is generated from the config schemas; a test fails when it is stale.
docs: setup
	$(BIN)/python -m ssekd.config.reference --write docs/config-reference.md

lint: setup
	$(BIN)/mypy
	$(BIN)/ruff check ssekd tests bench

clean:
	rm -rf $(VENV) $(COMPAT) build *.egg-info bench/results .pytest_cache .mypy_cache \
	  ssekd/hotpath/_kernels_c.*.so
