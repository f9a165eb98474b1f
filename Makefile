# animfleet: `make demo` and `make test` work on a fresh machine (Python 3.11+, no servers needed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv lock docs browser test-sdk test-sdk-ts generate-sdk-ts generate-sdk-sync fuzz-api demo test test-unit test-e2e test-faults test-faults-cluster test-e2e-cluster test-stores test-faults-rabbitmq test-e2e-rabbitmq test-faults-variants loadtest lint typecheck clean bench \
	bench-model bench-overhead bench-gateway bench-dispatch simulate sim-templates bench-placement \
	bench-scale \
	bench-families tune-model compile-model bench-aot bench-boot bench-versions bench-load eval-served

TORCH := torch==2.13.0
LOCK := requirements.lock
LINT_PATHS := animfleet_api animfleet_sdk animfleet dispatcher workers storage launcher tools tests benchmarks

# torch first and pinned: the CPU build on local disk. Installing it after other packages could
# let a resolver pull a multi-GB CUDA build; the lock's torch==2.13.0 then finds it satisfied.
# Then the pinned versions of every extra (the lock), then the project itself without
# resolving; pip check fails if pyproject.toml asks for something the lock lacks. The checkout
# goes on the path too (a .pth): `tools` and `benchmarks` are never installed, yet the
# `animfleet` command finds the offline tools' commands from anywhere.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e '.[all,dev]'
	$(PY) -m pip check
	$(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' | \
	  xargs -I{} sh -c 'echo "$(CURDIR)" > {}/animfleet-checkout.pth'
	touch $@

venv: $(STAMP)

# Re-pin $(LOCK) after changing dependencies in pyproject.toml: resolve the all and dev extras
# in a scratch venv (torch first, as above), keeping the current pins where they still fit
# (delete a line to let that package move), then freeze it.
LOCK_VENV ?= $(or $(TMPDIR),/tmp)/animfleet-lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet $(TORCH)
	$(LOCK_VENV)/bin/pip install --quiet -c $(LOCK) -e '.[all,dev]'
	$(LOCK_VENV)/bin/pip check
	{ sed -n '/^#/p' $(LOCK); \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable | grep -v -E '^(pip|wheel)==' \
	  | sed -E 's/^torch==([^+]*)\+.*/torch==\1/'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf $(LOCK_VENV)

demo: venv
	$(PY) -m launcher demo --brush --frames 16

test: venv browser
	$(PY) -m pytest

# The documentation site (docs/, mkdocs.yml) into out/site; strict, so a broken link fails.
docs: venv
	$(VENV)/bin/mkdocs build

# The playground's browser test drives Debian's Chromium and its driver: installed once, as
# root, when missing (elsewhere the test skips and says why).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "Chromium could not be installed: the playground's browser test will skip"

# Schemathesis with every check against a local gateway with API keys, for FUZZ_MINUTES.
FUZZ_MINUTES ?= 3
fuzz-api: venv
	$(PY) -m benchmarks.fuzz_api --minutes $(FUZZ_MINUTES)

# The HTTP SDK from a venv with only the base install, as the README installs it: no broker
# library, Redis client or torch installed, the import under 0.3 s (median CPU time), and 50 jobs
# through submit_many against a local fleet, each MP4 checked with PyAV.
test-sdk: venv
	rm -rf .venv-sdk && $(PYTHON) -m venv .venv-sdk && .venv-sdk/bin/pip install -q ./sdk-python
	ANIMFLEET_SDK_PYTHON=$(CURDIR)/.venv-sdk/bin/python $(PY) -m pytest -q \
		tests/e2e/test_sdk_base_install.py

# The TypeScript SDK (sdk-typescript/): its committed OpenAPI document and types checked against
# the gateway's, npm ci from its lock, tsc, then Node's test runner against a local fleet with keys.
test-sdk-ts: venv
	$(PY) -m pytest -q tests/sdk/test_typescript_sdk.py

# After editing animfleet_sdk/_async_client.py: rewrite the sync client generated from it.
generate-sdk-sync: venv
	$(PY) -m tools.generate_sync_sdk

# After changing the API: rewrite sdk-typescript/openapi.json and src/schema.d.ts from the gateway.
generate-sdk-ts: venv
	cd sdk-typescript && npm ci --no-audit --no-fund && PYTHON=$(CURDIR)/$(PY) npm run generate

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

# The same fault and end-to-end suites with each region's store on a Redis Cluster of its own
# (3 masters, 3 replicas) and its broker on the plain Redis (through the broker outbox).
test-faults-cluster: venv
	ANIMFLEET_LOCAL_STORE=cluster $(PY) -m pytest tests/faults

test-e2e-cluster: venv
	ANIMFLEET_LOCAL_STORE=cluster $(PY) -m pytest tests/e2e

# The store-level suites, each test on one Redis and on a Redis Cluster.
test-stores: venv
	$(PY) -m pytest tests/animfleet/region tests/faults/test_store_failover.py

# The same suites with every fleet's GPU queues on a private RabbitMQ node (quorum queues), the
# store on its Redis: where rabbitmq-server is installed.
test-faults-rabbitmq: venv
	ANIMFLEET_LOCAL_BROKER=rabbitmq $(PY) -m pytest tests/faults

test-e2e-rabbitmq: venv
	ANIMFLEET_LOCAL_BROKER=rabbitmq $(PY) -m pytest tests/e2e

# CI's second pass: the fault suite with the store on a Redis Cluster and, side by side, with
# the broker on RabbitMQ, each with parallel test workers (the faults mostly wait; each test's
# fleet has its own servers, in its worker's own port range). Each run's log is printed after.
FAULT_WORKERS ?= 3
VARIANT_LOGS := $(or $(TMPDIR),/tmp)/animfleet-faults
# The partial-failure and resharding cases (lost replies, throttled reads, dying threads, a cell
# added, RabbitMQ with the store away) run in `make test`'s pass, not yet side by side here:
# their fleets' cost under six concurrent fleets on two cores is the next thing to cut.
PLAIN_PASS_ONLY := $(addprefix --ignore=tests/faults/,test_lost_replies.py \
	test_worker_threads.py test_cell_added.py test_rabbitmq_store_outage.py)
test-faults-variants: venv
	@rm -rf $(VARIANT_LOGS) && mkdir -p $(VARIANT_LOGS)
	@{ ANIMFLEET_LOCAL_STORE=cluster $(PY) -m pytest -n $(FAULT_WORKERS) tests/faults \
		$(PLAIN_PASS_ONLY) \
		> $(VARIANT_LOGS)/cluster.log 2>&1; echo $$? > $(VARIANT_LOGS)/cluster.rc; } & \
	{ ANIMFLEET_LOCAL_BROKER=rabbitmq ANIMFLEET_TEST_PORT_SLOT=4 \
		$(PY) -m pytest -n $(FAULT_WORKERS) tests/faults $(PLAIN_PASS_ONLY) \
		> $(VARIANT_LOGS)/rabbitmq.log 2>&1; echo $$? > $(VARIANT_LOGS)/rabbitmq.rc; }; wait
	@for variant in cluster rabbitmq; do \
		echo "== tests/faults with the $$variant variant"; cat $(VARIANT_LOGS)/$$variant.log; done
	@test "$$(cat $(VARIANT_LOGS)/cluster.rc)" = 0 && test "$$(cat $(VARIANT_LOGS)/rabbitmq.rc)" = 0

bench-overhead: venv
	$(PY) benchmarks/overhead.py

# Dispatcher submits/s and latency against raw Celery apply_async, same Redis, same run.
bench-dispatch: venv
	$(PY) benchmarks/dispatch.py

# The PNG pixel check against Pillow's decode: photographs and a 4096^2 zero PNG (time, memory,
# the longest the interpreter lock is held).
.PHONY: bench-image-check
bench-image-check: venv
	$(PY) benchmarks/image_check.py

# The seeds' spike: routing policies x naive retries vs backoff, tables and PNGs in out/sim.
simulate: venv
	$(PY) -m launcher simulate spike --out out/sim

# Cache-aware placement on a trace with repeated images: compute-only vs compute + cache
# balancing vs the fleet's idle-holder rule; table and out/sim-templates/templates.png.
sim-templates: venv
	$(PY) -m tools.sim.templates --out out/sim-templates

# The same on a real local fleet (Redis, Celery workers with the stand-in's template cache):
# the scheduler's hand-off when saturated against without it, interleaved rounds, PASS/FAIL.
bench-placement: venv
	$(PY) -m benchmarks.placement

# One simulated day of 100 million requests over 20 regions.
bench-scale: venv
	$(PY) -m launcher simulate scale --out out/sim

# Gateway overhead per submit (POST /v1/jobs -> 202) against Client.submit: p50 and p99.
bench-gateway: venv
	$(PY) -m tools.gateway_bench

lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

typecheck: venv
	$(VENV)/bin/mypy

# The shipped teacher and student from the plain pipeline to what the worker serves (profile +
# AOT artifact), interleaved in one run, one thread per row, PSNR vs fp32 eager on every row;
# then an SVD-style random model (minutes; compile rows hit inductor's cache on later runs).
bench-model: venv
	$(PY) -m benchmarks.bench_model

# Each model family's serving profile on its tiny random-weight checkpoint (this CPU).
bench-families: venv
	$(PY) -m benchmarks.bench_families

# The served student's serving profile (serving_profile.json) and AOT packages for this device:
# a static package per listed bucket and one dynamic-shape package for every other working size.
SERVED_MODEL ?= animfleet-small-distilled
SERVED_BUCKETS ?= 8x64x64,8x32x32
tune-model: venv
	$(PY) -m launcher model tune --model $(SERVED_MODEL) --buckets 8x64x64

compile-model: venv
	$(PY) -m launcher model compile --model $(SERVED_MODEL) --buckets $(SERVED_BUCKETS)

# Each bucket (square, non-square, masked-box sizes) eager vs its AOT package: ratio, PSNR.
bench-aot: venv
	$(PY) -m benchmarks.bench_aot --model $(SERVED_MODEL)

# Worker boot to first job: AOT artifact vs torch.compile at boot (cold cache) vs eager.
bench-boot: venv
	$(PY) -m benchmarks.boot_bench --model $(SERVED_MODEL)

# One worker pool serving two resident versions vs one version vs a worker reloading on every
# version switch, interleaved in one run; PASS when the pool costs <= 1.10x per job.
bench-versions: venv
	$(PY) -m benchmarks.versions_pool --model $(SERVED_MODEL)

# A model directory of LOAD_GB of random safetensors fetched from a local SeaweedFS as a worker
# fetches it, and loaded from disk, each beside the raw read of the same bytes on this machine,
# interleaved; PASS when each reaches 0.7x its raw read. Written under $TMPDIR, removed after.
LOAD_GB ?= 2
bench-load: venv
	$(PY) -m benchmarks.bench_load --gb $(LOAD_GB)

# Motion accuracy of the served configuration vs the fp32 eager model on held-out clips.
eval-served: venv
	$(PY) -m tools.serving.evaluate --model $(SERVED_MODEL)

# Motion add-ons (LoRAs on the served student, trained with peft; resumable, state in
# run/addons/<name>): train, export to models/addons/<name> with its card, evaluate on held-out
# scenes. bench-addons: base job vs 1 and 2 add-ons on parallel branches vs the naive
# load-fuse-run-unfuse, interleaved, with the bar's PASS/FAIL.
.PHONY: train-addons bench-addons
ADDON_FLAGS := --steps 600 --rank 8 --learning-rate 0.01 --flow-weight 30
train-addons: venv
	for motion in shake pulse orbit; do ANIMFLEET_TORCH_THREADS=1 $(PY) -m \
		tools.training.addons.lora_cli train --motion $$motion --run run/addons/$$motion \
		--out models/addons/$$motion $(ADDON_FLAGS) || exit 1; done

bench-addons: venv
	$(PY) -m benchmarks.addons_bench

# Masked jobs vs the unmasked job by mask area (10/25/50/100%), interleaved: time cold and with a
# template-cache hit, unmasked pixels vs the input, motion inside the mask; PASS/FAIL on the bar.
.PHONY: bench-mask
bench-mask: venv
	ANIMFLEET_TORCH_THREADS=1 nice -n 10 $(PY) -m benchmarks.mask_bench --out out/bench-mask

# Motion brush: brushed regions on held-out photographs at 512 px scored by OpenCV optical flow
# (direction, speed, stillness outside, frame 0, loop closure) and at their edges, masks painted
# 10 px over a neighbour (boundary travel, smear, ghosting, leaving, seam), and a brushed 512 px video vs
# an unbrushed one through the served student, interleaved; both print PASS/FAIL on the bar.
.PHONY: eval-brush bench-brush
eval-brush: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m launcher eval --brush \
		--model models/animfleet-small-distilled --out out/eval-brush

bench-brush: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m benchmarks.brush_bench

# Full-size output: the edge fill (resumable, state in run/fill; re-run to continue), the
# held-out real photographs at 256 and 512 px (motion, first frame, the strip that comes into
# view vs border replication and upscaling), and per-video time, memory and MP4 size at 64,
# 256, 512 and 1024 px, interleaved, with the bar's PASS/FAIL.
# The fill of entering strips and opened holes against real surroundings, with PASS/FAIL.
.PHONY: train-fill eval-photos eval-fill bench-fullres
eval-fill: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m launcher eval --fill --out out/fill

train-fill: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m launcher train-fill --run-dir run/fill

eval-photos: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m launcher eval --photos \
		--model models/animfleet-small-distilled --out out/photos

bench-fullres: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m benchmarks.fullres_bench

# The image-conditioned add-on (path: a ControlNet-style branch reading a drawn motion path;
# resumable, state in run/addons/path): train, export to models/addons/path with its card,
# evaluate on held-out scenes and paths. bench-control: base job vs the branch run serially,
# beside the job, and the naive way (load + every step), interleaved, frames compared.
.PHONY: train-control bench-control
CONTROL_FLAGS := --steps 1800 --learning-rate 3e-3 --flow-weight 30 --seed 0
train-control: venv
	ANIMFLEET_TORCH_THREADS=1 nice -n 10 $(PY) -m tools.training.addons.control_cli train \
		--run run/addons/path --out models/addons/path $(CONTROL_FLAGS)

bench-control: venv
	ANIMFLEET_TORCH_THREADS=1 $(PY) -m benchmarks.control_bench

# The shipped model (models/animfleet-small): train in resumable stretches (state in run/train/small;
# re-running continues), export the EMA weights, evaluate on the held-out clips. The malloc
# thresholds (4 GiB mmap, 64 GiB trim) keep glibc from returning freed tensor buffers to the OS
# and re-faulting them every step.
# One intra-op thread: on a loaded machine two threads trained 5-8x slower (model card).
.PHONY: train eval distill eval-distill
TRAIN_THREADS ?= 1
TRAIN_ENV := MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736 \
	ANIMFLEET_TORCH_THREADS=$(TRAIN_THREADS)
train: venv
	$(TRAIN_ENV) $(PY) -m launcher train --run run/train/small --steps 5250 \
		--decay-from 4000 --decay-steps 800 \
		--export models/animfleet-small

# The student of models/animfleet-small: teacher samples, then the student (resumable).
distill: venv
	$(TRAIN_ENV) $(PY) -m launcher distill --run run/distill/small \
		--export models/animfleet-small-distilled

# Teacher 32x3 / 15x3 / 8x3 against student 8x1 / 4x1, in one run: out/distill/compare.md.
eval-distill: venv
	$(TRAIN_ENV) $(PY) -m launcher eval --model models/animfleet-small \
		--student models/animfleet-small-distilled --out out/distill --card

eval: venv
	$(TRAIN_ENV) $(PY) -m launcher eval --model models/animfleet-small --out out/eval --card

# PCA slimming of the served student: per-layer widths keeping 70, 80 and 90% of each layer's
# filter variance, and uniform widths at the same parameter counts (the control), each initialised
# from the student's kept channels and distilled from it (resumable; state in run/slim, targets
# shared by all arms). eval-slim: all arms and the student interleaved in one run (out/slim); of
# the arms that meet the bar, the closest to ground truth is shipped as models/animfleet-small-slim.
.PHONY: slim eval-slim
SLIM_SHARES ?= 0.7,0.8,0.9
slim: venv
	$(TRAIN_ENV) $(PY) -m launcher slim train --run run/slim --shares $(SLIM_SHARES)

eval-slim: venv
	$(TRAIN_ENV) $(PY) -m launcher slim eval --run run/slim --shares $(SLIM_SHARES) \
		--out out/slim --ship

clean:
	rm -rf run out .pytest_cache .mypy_cache .ruff_cache

# Continuous batching (worker --batch 4) vs one job per GPU on one local fleet: Poisson arrivals
# at 50%, 90% and 130% of the one-job capacity measured in the same run, the modes alternating;
# table of throughput and latency ratios, PASS when every job ran exactly once with the same
# frames in both modes; plot in run/bench-batching/latency.png.
.PHONY: bench-batching
BATCHING_SIZE ?= 32
bench-batching: venv
	nice -n 10 $(PY) -m benchmarks.batching_bench --size $(BATCHING_SIZE)

# The same submit load against a region of 1, 2 and 4 cells, each its own redis-server: the
# busiest Redis's CPU time per 1,000 submits vs 1 cell (PASS/FAIL), run/bench-cells/cells.png.
.PHONY: bench-cells
bench-cells: venv
	$(PY) -m benchmarks.cells
