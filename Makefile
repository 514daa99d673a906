# PaddleCloud Hub. Two commands for users: `make demo` and `make test`.
# Everything is set up from scratch and cached by version, so a warm run is quick.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
PORT ?= 8000
export PADDLECLOUD_HOME ?= $(HOME)/.paddlecloud
# Python writes its bytecode caches here, as on a user's machine, even where the environment
# says not to (PYTHONDONTWRITEBYTECODE=1, as on the machine this suite is measured on): without
# them every pytest process rewrote the asserts of every test module and conftest again (pytest
# caches that in __pycache__), about 75 CPU-seconds of a make test, and every process compiled
# this tree's modules it imported. __pycache__ is ignored by git and the images' .dockerignore.
unexport PYTHONDONTWRITEBYTECODE
# Python dependencies are reinstalled only when pyproject.toml (or what we leave out) changes.
# uv installs them: the versions pip would pick, from a cache that outlives the checkout, in
# about 5 s. Their bytecode is left to the first import of each module, which writes it (see
# PYTHONDONTWRITEBYTECODE above): a make test imports about half of the venv's 13,000 modules,
# and compiling them all here (--compile-bytecode) took 25 s before any test could start.
PIP_LEAVE_OUT := images/pip-leave-out.txt
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
CACHE := $(or $(PADDLECLOUD_CACHE),$(HOME)/.cache/paddlecloud)
export UV_CACHE_DIR ?= $(CACHE)/uv
# mypy's incremental cache outlives the checkout too: it checks each cached module against its
# file's hash, so a fresh clone rechecks only what changed (about 1 s, not 14 of the setup).
export MYPY_CACHE_DIR ?= $(CACHE)/mypy
VENV_STAMP := $(VENV)/.stamp-$(shell cat pyproject.toml $(PIP_LEAVE_OUT) | sha1sum | cut -c1-12)-uv$(UV_VERSION)
CHP := node_modules/.bin/configurable-http-proxy
# Every tier runs in a random order (pytest-randomly, jest --randomize): tests must pass in
# any order. One seed serves a whole `make test` and each tier prints it; replay a failure
# with `make test TEST_SEED=N` (or the tier's target).
ifndef TEST_SEED
TEST_SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
endif
export TEST_SEED
PYTEST := $(VPY) -m pytest -p no:cacheprovider -p randomly --randomly-seed=$(TEST_SEED)
# The JupyterLab extension's entry in the dev venv: a link to labextension/prebuilt.
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/@paddlecloud/jupyterlab-jobs

.PHONY: help setup labext demo test test-tiers lint docs test-unit test-lab test-local test-cluster test-cluster-real-node test-cluster-kwok tier-part test-browser test-helm test-helm-real-node test-helm-kwok helm-schema screenshots \
  browser-deps login-deps cluster-deps kwok-deps clean

help:
	@echo "make demo   start the local PaddleCloud Hub at http://127.0.0.1:$(PORT)"
	@echo "make test   set up everything and run every test tier"

setup: $(VENV_STAMP) $(CHP) labext

$(VENV_STAMP): pyproject.toml $(PIP_LEAVE_OUT)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q uv==$(UV_VERSION)
	$(UV) pip install -q --python $(VPY) -e '.[hub,paddle,test,docs]'
	$(UV) pip uninstall -q --python $(VPY) -r $(PIP_LEAVE_OUT)
	rm -f $(VENV)/.stamp-* && touch $@

$(CHP): package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

# The JupyterLab extension: npm ci, tsc and jupyter-builder, each only when its inputs
# changed (content hashes; see labextension/build.py), then linked into the dev venv.
labext: $(VENV_STAMP)
	$(VPY) labextension/build.py --link $(LABEXT_LINK)

# Debian's Chromium for the browser tier (Playwright drives it; it never downloads a browser).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The login tests' real servers on 127.0.0.1: Debian's OpenLDAP server and client tools (each
# test runs its own slapd, tests/ldaputil.py; the system's slapd service is not started or
# configured), and the OpenID Connect provider (oidc-provider from npm, tests/oidcutil.py),
# installed again only when its lock file changes.
OIDC_PROVIDER := tests/oidc/node_modules/.stamp
$(OIDC_PROVIDER): tests/oidc/package-lock.json
	cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error
	touch $@

login-deps: $(OIDC_PROVIDER)
	@{ test -x /usr/sbin/slapd && command -v ldapmodify >/dev/null; } || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils >/dev/null; }

demo: setup
	PATH=$(CURDIR)/$(VENV)/bin:$(CURDIR)/node_modules/.bin:$$PATH \
	  $(VPY) -m paddle_ext.hub.demo --port $(PORT)

include tools/k8s/k8s.mk
include benchmarks/bench.mk
include tools/docs/docs.mk

# The control plane's binaries build in the background from the start (tools/k8s/prebuild.sh:
# on a cold machine ~25 minutes of Go that then overlap setup and the quick tiers).
test:
	@tools/k8s/prebuild.sh $(MAKE) --no-print-directory test-tiers

# Lint first, then two chains side by side (tools/alongside.sh): in the foreground the tests that
# need the machine's one real node (the cluster tier's real-node part, then helm's install tests),
# which run one at a time and are the longest stretch; beside them the docs build, the unit, lab,
# local and browser tiers, then the helm and cluster tiers' KWOK parts, their output printed when
# they end and kept in $(SIDE_TIERS_LOG) (the docs build first there: 5 s the foreground need not
# wait for). On a cold machine the side chain's tiers before the KWOK part run while the binaries
# build (tools/k8s/prebuild.sh), as they did when every tier ran one after another.
SIDE_TIERS_LOG := test-artifacts/side-tiers.log
test-tiers: setup browser-deps login-deps
	$(MAKE) --no-print-directory lint
	tools/alongside.sh $(SIDE_TIERS_LOG) '$(MAKE) --no-print-directory docs test-unit test-lab test-local test-browser test-helm-kwok test-cluster-kwok' \
	  $(MAKE) --no-print-directory test-cluster-real-node test-helm-real-node

# The quick static tier, first: ruff's checks and mypy on the pure modules, as configured in
# pyproject.toml (seconds). The extension's TypeScript is type-checked by test-lab (tsc, noEmit).
lint: $(VENV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Every pytest tier runs the same way: `$(call tier,NAME,EXTRA_PATH)`. A tier whose folder
# holds no test file fails, and so does one where pytest collects nothing (its exit code
# 5 is kept): a tier that lost its tests must not pass quietly. Each prints its skip reasons and,
# last, one line per failed or erroring test (-rfEs), and its 25 slowest tests, so a skipped claim
# or a slow test shows in every run, and the end of a failed run's output names what failed.
# The tiers without a cluster run their test files in parallel worker processes (pytest-xdist,
# TIER_WORKERS_<tier>; one file stays in one worker): their tests mostly wait (jobs' rendezvous
# and restarts, servers starting, a browser), leaving 2 CPUs two-thirds idle when run one at a
# time. `make test-local TIER_WORKERS_local=0` runs a tier in one process. The files go out longest
# first, by the tier's last run on this machine (tests/file_schedule.py), not by how many tests
# they hold (xdist's --loadscope-reorder, off: a file of two 3-minute tests went out last).
TIER_PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/node_modules/.bin
TIER_WORKERS_unit ?= 2
TIER_WORKERS_local ?= 3
TIER_WORKERS_browser ?= 2
# The cluster tier's KWOK part runs in 3 workers, each with a KWOK-only cluster of its own (its
# tests mostly wait on Kueue and the fake nodes; an idle KWOK cluster with Kueue costs about 4% of
# a core). Its three longest files, test_kueue.py, test_kueue_fairness.py and test_bench_smoke.py,
# take about 200, 200 and 110 s, the other eleven about 160 s together.
# The real-node part stays one process: its tests share the machine's one real node.
TIER_WORKERS_cluster_kwok ?= 3
# $(call tier,NAME,EXTRA_PATH,ENV,WORKERS): WORKERS, when given, instead of TIER_WORKERS_<NAME>.
define tier
@ls tests/$(1)/test_*.py >/dev/null 2>&1 || { echo "$(1) tier: no test_*.py in tests/$(1); a tier without tests fails" >&2; exit 1; }
@echo "$(1) tier$(if $(3), ($(3))): random order, seed $(TEST_SEED) (replay: make test-$(1) TEST_SEED=$(TEST_SEED))"
$(3) PATH=$(TIER_PATH)$(if $(2),:$(2)):$$PATH $(PYTEST) tests/$(1) -q -rfEs --durations=25$(if $(filter-out 0,$(or $(4),$(TIER_WORKERS_$(1)))), -n $(or $(4),$(TIER_WORKERS_$(1))) --dist loadfile --no-loadscope-reorder)
endef

# The cluster and helm tiers need the control-plane binaries (and, as root, the images).
# With PADDLECLOUD_SKIP_CLUSTER=1 a failed build does not stop make: the cluster tier's
# fixtures then skip it with the reason (tests/cluster/conftest.py). CI (.ci/run) sets
# PADDLECLOUD_REQUIRE_REAL_NODE=1: then those skips fail, and asking to skip the cluster fails at once.
# kwok-deps: what the KWOK part needs (the binaries, no images).
DEPS_OF_cluster-deps := k8s-bin $(NODE_DEPS)
DEPS_OF_kwok-deps := k8s-bin
ifeq ($(PADDLECLOUD_SKIP_CLUSTER),1)
cluster-deps kwok-deps:
	@if [ "$(PADDLECLOUD_REQUIRE_REAL_NODE)" = 1 ]; then echo "PADDLECLOUD_SKIP_CLUSTER=1 and" \
	  "PADDLECLOUD_REQUIRE_REAL_NODE=1 are set together: this run must run the cluster tiers; unset one" >&2; exit 1; fi
	@$(MAKE) --no-print-directory $(DEPS_OF_$@) || echo "cluster binaries or images could not be built;" \
	  "PADDLECLOUD_SKIP_CLUSTER=1: the tiers that need them skip" >&2
else
cluster-deps: $(DEPS_OF_cluster-deps)
kwok-deps: $(DEPS_OF_kwok-deps)
endif

test-unit: setup
	$(call tier,unit)

# The extension's TypeScript: type-check the tests, then jest (offline: npm ran in setup).
test-lab: setup
	cd labextension && node_modules/.bin/eslint src test && node_modules/.bin/prettier --check src test \
	  && node_modules/.bin/tsc -p tsconfig.test.json && node_modules/.bin/jest --randomize --seed=$(TEST_SEED)

test-local: setup login-deps
	$(call tier,local)

# Two parts side by side, each a pytest session with a cluster of its own (tests/tierparts.py):
# the tests that need the real node in the foreground, the rest on a KWOK-only cluster next to them
# (tools/alongside.sh), its output printed when it ends and kept in $(CLUSTER_KWOK_LOG). One session
# left the 2 CPUs about half idle. make test runs the two parts in its two chains (test-tiers).
CLUSTER_KWOK_LOG := test-artifacts/cluster-kwok-part.log
test-cluster: setup cluster-deps
	tools/alongside.sh $(CLUSTER_KWOK_LOG) '$(MAKE) --no-print-directory tier-part TIER=cluster PART=kwok' \
	  $(MAKE) --no-print-directory tier-part TIER=cluster PART=real-node

# Each part alone, with what it needs (make test runs them in its two chains).
test-cluster-real-node: setup cluster-deps
	$(MAKE) --no-print-directory tier-part TIER=cluster PART=real-node
test-cluster-kwok: setup kwok-deps
	$(MAKE) --no-print-directory tier-part TIER=cluster PART=kwok

# One part of the cluster or helm tier (TIER; PART: real-node or kwok); test-cluster and test-helm
# run both.
tier-part:
	$(call tier,$(TIER),$(K8S_BIN_DIR),PADDLECLOUD_CLUSTER_PART=$(PART),$(TIER_WORKERS_$(TIER)_$(PART)))

test-browser: setup browser-deps login-deps
	$(call tier,browser)

# The README's three screenshots (docs/_static/screenshots/), taken by the browser tier's own
# tests at the states they check (tests/browser/labpage.py: docs_screenshot); never by hand.
screenshots: setup browser-deps
	PADDLECLOUD_DOCS_SCREENSHOTS=1 PATH=$(TIER_PATH):$$PATH $(PYTEST) -q -rfEs tests/browser/test_live_training.py \
	  tests/browser/test_lab_panel.py tests/browser/test_admin_overview.py

# The chart (helm/paddlecloud-hub): lint, render and schema checks, server-side dry-run on the
# test control plane, and (as root, with `make images`) helm install on the real node, used end to end
# (with an OpenID Connect login through the test provider: its node modules).
test-helm: setup cluster-deps $(OIDC_PROVIDER)
	$(call tier,helm,$(K8S_BIN_DIR))

# Its two parts alone (make test runs them in its two chains): the install tests on the real node,
# and the rest (lint, rendering, server-side dry-runs on a KWOK-only cluster).
test-helm-real-node: setup cluster-deps $(OIDC_PROVIDER)
	$(MAKE) --no-print-directory tier-part TIER=helm PART=real-node
test-helm-kwok: setup kwok-deps
	$(MAKE) --no-print-directory tier-part TIER=helm PART=kwok

# The documentation site (docs/, Sphinx with MyST Markdown), warnings as errors: a broken
# link, a page left out of every toctree or a cross-reference to nothing fails the build.
# Output in docs/_build/html (git-ignored); open docs/_build/html/index.html.
docs: $(VENV_STAMP)
	$(VENV)/bin/sphinx-build -E -W --keep-going -n -q -b html docs docs/_build/html

# values.schema.yaml (hand-written) -> values.schema.json (what helm reads).
helm-schema: $(VENV_STAMP)
	$(VPY) helm/schema.py

clean:
	rm -rf $(VENV) node_modules .cluster test-artifacts labextension/node_modules labextension/lib \
	  labextension/prebuilt labextension/.build-stamp labextension/tsconfig.tsbuildinfo docs/_build
