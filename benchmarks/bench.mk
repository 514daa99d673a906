# Measured comparisons (benchmarks/README.md): `make bench` runs every benchmark and
# writes benchmarks/results.md; `make bench-quick` runs smaller sizes (a first look, also
# written to results.md). They need the Python venv and the control-plane binaries, not
# the JupyterLab extension or the proxy. Every cluster and process they start is stopped,
# also on Ctrl-C.
# `make bench-smoke`: every section at the smallest size, checks only, nothing written (what the
# test tiers run, tests/*/test_bench_smoke.py).
.PHONY: bench bench-quick bench-smoke

BENCH_RUN = PATH=$(abspath $(VENV))/bin:$(K8S_BIN_DIR):$$PATH $(abspath $(VPY)) benchmarks/run.py

bench: $(VENV_STAMP) k8s-bin $(NODE_DEPS)
	$(BENCH_RUN)

bench-quick: $(VENV_STAMP) k8s-bin $(NODE_DEPS)
	$(BENCH_RUN) --quick

bench-smoke: $(VENV_STAMP) k8s-bin $(NODE_DEPS)
	$(BENCH_RUN) --smoke
