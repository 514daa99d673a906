# Measured comparisons (benchmarks/README.md): `make bench` writes benchmarks/results.md.
.PHONY: bench

bench: setup k8s-bin
	PATH=$(CURDIR)/$(VENV)/bin:$(K8S_BIN_DIR):$$PATH $(VPY) benchmarks/log_follow.py
