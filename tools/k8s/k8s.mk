# Test cluster (issues 3 and 10): binaries built from the Go module proxy into a cache
# outside the repo (tools/k8s/build.sh); images built from images/ with buildah
# (tools/k8s/images.py, root only); `make cluster` runs the control plane, KWOK GPU
# nodes and, as root, a real node (tools/k8s/node.py).
K8S_BIN_DIR := $(shell tools/k8s/build.sh --print)
CLUSTER_DIR ?= .cluster
CLUSTER_NODES ?= 2
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)
# The real node and its images need root; without it they are skipped with a notice.
NODE_DEPS := $(if $(IS_ROOT),images,)
NODE_PACKAGES := containerd runc containernetworking-plugins buildah debootstrap conntrack iptables ipset

.PHONY: k8s-bin node-deps images cluster cluster-down

# Builds once (cold: minutes, one binary at a time); a no-op when cached.
k8s-bin:
	@tools/k8s/build.sh >/dev/null

# Debian packages of the real node and the image builds (root; installed only when missing).
node-deps:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

# Every images/*/Dockerfile (+ the pod sandbox image), cached by content; a no-op when cached.
images: node-deps k8s-bin labext  # the notebook image carries the prebuilt JupyterLab panel
	@python3 tools/k8s/images.py build --bin-dir $(K8S_BIN_DIR)

cluster: setup k8s-bin $(NODE_DEPS)
	$(VPY) tools/k8s/cluster.py up --state-dir $(CLUSTER_DIR) --bin-dir $(K8S_BIN_DIR) --nodes $(CLUSTER_NODES) \
	  --real-node auto

cluster-down:
	@if [ -x $(VPY) ]; then $(VPY) tools/k8s/cluster.py down --state-dir $(CLUSTER_DIR); \
	else python3 tools/k8s/cluster.py down --state-dir $(CLUSTER_DIR); fi
