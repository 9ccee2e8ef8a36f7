# ssekd: the two commands are `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= etc/zilla.yaml
# Reinstall whenever pyproject.toml changes.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Debian programs the tests and benchmarks drive as real clients.
DEBS   := curl openssl wrk nghttp2-client chromium default-jre-headless
PYTEST_ARGS ?=

.PHONY: run test bench setup system-deps check lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	# Editable in "compat" mode puts the project folder on sys.path, which is how twistd
	# finds twisted/plugins/ssekd_plugin.py (see DESIGN.md).
	$(BIN)/python -m pip install -q -e '.[dev,spark]' --config-settings editable_mode=compat
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

system-deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Serve etc/zilla.yaml in the foreground: dev TLS key, dev broker and demo producer as needed.
run: setup
	$(BIN)/python -m ssekd.dev --dev-broker --config $(CONFIG)

test: setup system-deps
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: setup system-deps
	$(BIN)/python bench/run.py

check: setup
	$(BIN)/ssekd check --config $(CONFIG)

lint: setup
	$(BIN)/mypy
	$(BIN)/ruff check ssekd spark tests bench

clean:
	rm -rf $(VENV) build *.egg-info bench/results .pytest_cache .mypy_cache
