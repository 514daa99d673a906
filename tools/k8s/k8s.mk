# Test control plane (issue 3): binaries built from the Go module proxy into a cache
# outside the repo, keyed by tools/k8s/VERSIONS; `make cluster` runs it on 127.0.0.1.
K8S_BIN_DIR := $(shell tools/k8s/build.sh --print)
CLUSTER_DIR ?= .cluster
CLUSTER_NODES ?= 2

.PHONY: k8s-bin cluster cluster-down

# Builds once (cold: minutes, one binary at a time); a no-op when cached.
k8s-bin:
	@tools/k8s/build.sh >/dev/null

cluster: setup k8s-bin
	$(VPY) tools/k8s/cluster.py up --state-dir $(CLUSTER_DIR) --bin-dir $(K8S_BIN_DIR) --nodes $(CLUSTER_NODES)

cluster-down:
	@if [ -x $(VPY) ]; then $(VPY) tools/k8s/cluster.py down --state-dir $(CLUSTER_DIR); \
	else python3 tools/k8s/cluster.py down --state-dir $(CLUSTER_DIR); fi
