# animfleet: `make demo` and `make test` work on a fresh machine (Python 3.11+, no servers needed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv demo test test-unit test-e2e test-faults loadtest lint typecheck clean bench bench-model bench-overhead \
	bench-gateway bench-dispatch simulate bench-scale

# torch first and pinned: the CPU build on local disk. Installing it after other packages could
# let a resolver pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(STAMP)

demo: venv
	$(PY) -m tools.cli demo

test: venv
	$(PY) -m pytest

test-unit: venv
	$(PY) -m pytest --ignore=tests/e2e

test-e2e: venv
	$(PY) -m pytest tests/e2e

# A local 3-region fleet (model stand-in) under a locust spike through the HTTP gateways:
# throughput, p50/p99, success rate, spillover, accounting; out/loadtest/{report.json,latency.png}.
LOADTEST_JOBS ?= 20000
LOADTEST_WORKERS ?= 4
LOADTEST_JOB_S ?= 0.5
loadtest: venv
	$(PY) -m benchmarks.loadtest.run --jobs $(LOADTEST_JOBS) --workers $(LOADTEST_WORKERS) \
		--job-seconds $(LOADTEST_JOB_S)

# Faults injected into real local fleets (part of `make test` too): kills, restarts, outages.
test-faults: venv
	$(PY) -m pytest tests/faults

bench-overhead: venv
	$(PY) benchmarks/overhead.py

# Dispatcher submits/s and latency against raw Celery apply_async, same Redis, same run.
bench-dispatch: venv
	$(PY) benchmarks/dispatch.py

# The seeds' spike: routing policies x naive retries vs backoff, tables and PNGs in out/sim.
simulate: venv
	$(PY) -m tools.cli simulate spike --out out/sim

# One simulated day of 100 million requests over 20 regions.
bench-scale: venv
	$(PY) -m tools.cli simulate scale --out out/sim

# Gateway overhead per submit (POST /v1/jobs -> 202) against Client.submit: p50 and p99.
bench-gateway: venv
	$(PY) -m tools.gateway_bench

lint: venv
	$(VENV)/bin/ruff check animfleet dispatcher workers storage tools tests benchmarks

typecheck: venv
	$(VENV)/bin/mypy

# Each model optimization against the plain pipeline on this CPU (minutes; the compile row's
# first run compiles for a few minutes more, later runs hit inductor's cache).
bench-model: venv
	$(PY) -m benchmarks.bench_model

# The shipped model (models/animfleet-small): train in resumable stretches (state in run/train/small;
# re-running continues), export the EMA weights, evaluate on the held-out clips. The malloc
# thresholds keep glibc from returning and re-faulting tensor buffers every step (REFERENCE.md).
# One intra-op thread: on a loaded machine two threads trained 5-8x slower (model card).
.PHONY: train eval distill eval-distill
TRAIN_THREADS ?= 1
TRAIN_ENV := MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736 \
	ANIMFLEET_TORCH_THREADS=$(TRAIN_THREADS)
train: venv
	$(TRAIN_ENV) $(PY) -m tools.cli train --run run/train/small --steps 5250 \
		--decay-from 4000 --decay-steps 800 \
		--export models/animfleet-small

# The student of models/animfleet-small: teacher samples, then the student (resumable).
distill: venv
	$(TRAIN_ENV) $(PY) -m tools.cli distill --run run/distill/small \
		--export models/animfleet-small-distilled

# Teacher 32x3 / 15x3 / 8x3 against student 8x1 / 4x1, in one run: out/distill/compare.md.
eval-distill: venv
	$(TRAIN_ENV) $(PY) -m tools.cli eval --model models/animfleet-small \
		--student models/animfleet-small-distilled --out out/distill --card

eval: venv
	$(TRAIN_ENV) $(PY) -m tools.cli eval --model models/animfleet-small --out out/eval --card

clean:
	rm -rf run out .pytest_cache .mypy_cache .ruff_cache
