# Set-up, tests and the demo. Every target runs inside .venv, which `make install` creates.
PYTHON       := .venv/bin/python
DEMO_CONFIG  ?= configs/vil/retinanet_vil-demo_fpn_1xb8-3000i_shapes-coco-128.py
DEMO_WORKDIR ?= work_dirs/demo
DEMO_DATA    := data/shapes
DEMO_SPREAD_RECORDS ?= docs/records/demo_spread
DEMO_SPREAD_ARGS ?=
PYTEST_ARGS  ?=
# the oldest end of the declared range (requirements/oldest.txt), in an environment of its own
OLDEST_VENV  ?= .venv-oldest
OLDEST_RECORD ?= work_dirs/tests-oldest/durations.json
TEST_WORKERS ?= 2
TEST_RECORD  ?= work_dirs/tests/durations.json
LAB_RECORD   ?= work_dirs/tests-lab/durations.json
PEERS_DIR    ?=
BENCH_ARGS   ?=
STOCK_ARGS   ?=
BENCH_MODELS_ARGS ?=
BENCH_DEPLOY_ARGS ?=
MMDEPLOY_DIR ?= ../shared/mmdeploy
# the Python of the GPU targets: the venv where there is one, else the machine's (a lent GPU machine
# has torch and triton but no venv and no network; those targets need nothing else)
GPU_PYTHON   ?= $(if $(wildcard $(PYTHON)),$(PYTHON),python3)
GPU_PROOF_DIR ?= work_dirs/gpu_proof
# the OpenMMLab stack for a GPU machine: its wheels (made here) and their install there
GPU_WHEELHOUSE ?= .gpu_wheelhouse
GPU_SITE     ?= .gpu_site
GPU_MODELS_DIR ?= work_dirs/gpu_proof_models
GPU_MODELS_ARGS ?=
GPU_WHEELHOUSE_ARGS ?=
DOCS_OUT     ?= work_dirs/docs/html
# Triton kernels run interpreted on CPU tensors only where there is no GPU; with one, compiled on CUDA
INTERPRET    = $$($(PYTHON) -c 'import torch; print(int(not torch.cuda.is_available()))')

.PHONY: install lint docs test test-lab test-oldest test-slow test-stock test-ops gpu-proof gpu-wheelhouse gpu-setup gpu-proof-models \
	gpu-proof-models-smoke kernels bench bench-models bench-deploy bench-demos arena demo demo-spread clean

install:
	@bash tools/install.sh

# ruff over the repository (pyproject.toml: pycodestyle, pyflakes, import order, bugbear); .ci/run runs it first
# and .pre-commit-config.yaml runs the same check (with --fix) before each commit
lint: install
	$(PYTHON) -m ruff check .

# the documentation site from docs/ into DOCS_OUT, every warning an error (a broken link between pages, a page
# outside the table of contents, a docstring that is not valid reST); make test-lab builds it too (tests/test_docs.py)
docs: install
	$(PYTHON) -m sphinx -b html -W --keep-going -q docs $(DOCS_OUT)

# the library's tests on TEST_WORKERS pytest-xdist workers (the tests of one xdist_group on one); the suite's wall
# time and slowest tests recorded in TEST_RECORD
test: install
	TRITON_INTERPRET=$(INTERPRET) PATH="$(CURDIR)/.venv/bin:$$PATH" $(PYTHON) -m pytest tests -m "not slow and not lab" \
		-n $(TEST_WORKERS) --dist loadgroup --record-durations $(TEST_RECORD) $(PYTEST_ARGS)

# the maintainers' checks (tests/lab and the Slurm cluster's): the experimental kernels, the GPU proofs' CPU runs,
# the kernels' ahead-of-time compile, the step audits, the benchmarks and records, the GPU wheelhouse, mmdeploy's
# own tools, OpenMMLab's own suites with mmvisattn imported; .ci/run runs it after make test
test-lab: install
	TRITON_INTERPRET=$(INTERPRET) PATH="$(CURDIR)/.venv/bin:$$PATH" $(PYTHON) -m pytest tests -m "lab and not slow" \
		-n $(TEST_WORKERS) --dist loadgroup --record-durations $(LAB_RECORD) $(PYTEST_ARGS)

# the same suite on the oldest torch the package declares (requirements/oldest.txt: torch 2.6.0), in $(OLDEST_VENV),
# made and cached as make install makes .venv (mmcv compiled against that torch, for the CPU); what needs a newer
# torch skips, each test naming why; the record in OLDEST_RECORD
test-oldest:
	@MMVISATTN_VENV=$(CURDIR)/$(OLDEST_VENV) MMVISATTN_PINS=$(CURDIR)/requirements/oldest.txt MMVISATTN_MMCV_CUDA=0 \
		bash tools/install.sh
	TRITON_INTERPRET=$$($(OLDEST_VENV)/bin/python -c 'import torch; print(int(not torch.cuda.is_available()))') \
		PATH="$(CURDIR)/$(OLDEST_VENV)/bin:$$PATH" $(OLDEST_VENV)/bin/python -m pytest tests -m "not slow" \
		-n $(TEST_WORKERS) --dist loadgroup --record-durations $(OLDEST_RECORD) $(PYTEST_ARGS)

# OpenMMLab's own test suites (../shared/stock_tests), plain and with mmvisattn imported, compared test by test
# (tests/stock/compare.py); the plain outcomes kept in tests/stock/plain_baseline.json, which make test-lab's
# tests/lab/test_stock_suites.py takes where the suites and the stack are the same; STOCK_ARGS=--suites mmdet ...
test-stock: install
	$(PYTHON) tests/stock/compare.py --write-baseline $(STOCK_ARGS)

test-slow: install
	TRITON_INTERPRET=$(INTERPRET) PATH="$(CURDIR)/.venv/bin:$$PATH" $(PYTHON) -m pytest tests -m slow $(PYTEST_ARGS)

# the op tests alone, with torch, triton and pytest only (on CUDA where there is a GPU, Triton compiled)
test-ops:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) -m pytest tests/test_ops -p no:cacheprovider $(PYTEST_ARGS)

# every op on CUDA against its float64 reference, races, autocast, host syncs, random states, torch.compile
# and the benchmark rows (tools/analysis_tools/gpu_proof.py; a few minutes on one GPU, no install needed)
gpu-proof:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) tools/analysis_tools/gpu_proof.py --out-dir $(GPU_PROOF_DIR)

# here, with the package registry: the wheels of mmengine, mmdet, mmseg and what the GPU machine lacks and mmcv's
# source (which make gpu-setup compiles there in minutes), into $(GPU_WHEELHOUSE); mmcv's CUDA build for sm_90 too
# where the cache holds one. GPU_WHEELHOUSE_ARGS=--mmcv-build compiles it here (over an hour on 2 cores; cached)
gpu-wheelhouse:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) tools/misc/gpu_wheelhouse.py --out $(GPU_WHEELHOUSE) $(GPU_WHEELHOUSE_ARGS)

# on the GPU machine, without network: the wheelhouse installed into $(GPU_SITE), mmcv's ops run on CUDA
gpu-setup:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) tools/misc/gpu_setup.py --wheelhouse $(GPU_WHEELHOUSE) --target $(GPU_SITE)

# on the GPU machine after gpu-setup: every family trained, tested and resumed through tools/train.py and
# tools/test.py beside its stock model (tools/analysis_tools/gpu_proof_models.py; GPU_MODELS_ARGS=--largest ...)
gpu-proof-models:
	PYTHONPATH=$(CURDIR):$(CURDIR)/$(GPU_SITE) $(GPU_PYTHON) tools/analysis_tools/gpu_proof_models.py \
		--out-dir $(GPU_MODELS_DIR) $(GPU_MODELS_ARGS)

# the same code on this CPU at 128 pixels (make test-lab runs it)
gpu-proof-models-smoke: install
	$(PYTHON) tools/analysis_tools/gpu_proof_models.py --smoke --fresh --out-dir work_dirs/gpu_proof_models_smoke

# every Triton kernel compiled ahead of time for sm_80 and sm_90 at every launch of the shipped models
kernels: install
	$(PYTHON) tools/analysis_tools/compile_kernels.py --arch sm_80 sm_90 --out-dir work_dirs/compile_kernels

# the side-by-side benchmark (about 20 minutes on 2 cores), its record into docs/records/bench/ (the docs render
# docs/records/benchmarks.md's tables from it); PEERS_DIR=... adds the official modules, BENCH_ARGS=--cases ...
# runs some
bench: install
	$(PYTHON) tools/analysis_tools/benchmark_suite.py $(if $(PEERS_DIR),--peers $(PEERS_DIR)) \
		--out-dir work_dirs/bench --record-dir docs/records/bench $(BENCH_ARGS)

# every project model beside the stock model it replaces, in training, and the largest input each trains at
# (tools/analysis_tools/benchmark_models.py), its record into docs/records/bench_models/ (the docs render the
# tables of docs/records/models.md and of each family's page from it); BENCH_MODELS_ARGS=--pairs ... runs some
bench-models: install
	$(PYTHON) tools/analysis_tools/benchmark_models.py --out-dir work_dirs/bench_models \
		--record-dir docs/records/bench_models $(BENCH_MODELS_ARGS)

# every family's demo beside its stock twin, images per second through tools/analysis_tools/benchmark.py on the CPU
# (tools/analysis_tools/benchmark_demos.py, about 4 minutes on 2 cores); its record into docs/records/bench_demos/
# (rendered by the inference page); BENCH_DEMOS_ARGS=--pairs ... runs some
bench-demos: install
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA)
	$(PYTHON) tools/analysis_tools/benchmark_demos.py --out-dir work_dirs/bench_demos \
		--record-dir docs/records/bench_demos $(BENCH_DEMOS_ARGS)

# the attention arena of the ViL (150 iterations, about 25 minutes on 2 cores) and SegFormer-RWGKA (400, about 70)
# demos: every registered attention, 3 seeds, two training runs side by side with one thread each
# (tools/analysis_tools/compare_attentions.py); its records and plots into docs/records/arena/ (rendered by the
# attentions page); ARENA_ARGS=--attentions ... compares some
ARENA_RUNS ?= configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py:150 \
	configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py:400
arena: install
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA)
	for run in $(ARENA_RUNS); do \
		$(PYTHON) tools/analysis_tools/compare_attentions.py $${run%:*} --iters $${run##*:} --jobs 2 --threads 1 \
			--record-dir docs/records/arena $(ARENA_ARGS) || exit 1; \
	done

# every family's demo trained briefly, tested, exported by mmdeploy's tools/deploy.py and tested by its tools/test.py
# on ONNX Runtime (about 35 minutes on 2 cores), and the deployed latency beside the stock models
# (tools/analysis_tools/benchmark_deploy.py); its record into docs/records/bench_deploy/ (rendered by the deployment
# page); MMDEPLOY_DIR is a checkout of mmdeploy 1.3.1, BENCH_DEPLOY_ARGS=--cases ... runs some
bench-deploy: install
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA)
	$(PYTHON) tools/analysis_tools/benchmark_deploy.py --mmdeploy-dir $(MMDEPLOY_DIR) --out-dir work_dirs/bench_deploy \
		--record-dir docs/records/bench_deploy $(BENCH_DEPLOY_ARGS)

demo: install
	@start=$$(date +%s); \
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA) && \
	$(PYTHON) tools/train.py $(DEMO_CONFIG) --work-dir $(DEMO_WORKDIR) && \
	$(PYTHON) tools/test.py $(DEMO_CONFIG) $$(cat $(DEMO_WORKDIR)/last_checkpoint) --work-dir $(DEMO_WORKDIR) \
		--show-dir predictions && \
	$(PYTHON) tools/misc/montage.py $(DEMO_WORKDIR) --pattern '*/predictions/*' \
		--caption 'each pair: ground truth (left) | prediction (right)' --out $(DEMO_WORKDIR)/demo_predictions.png && \
	echo "demo finished in $$(( $$(date +%s) - start )) s; metrics above, predictions in $(DEMO_WORKDIR)/demo_predictions.png" && \
	$(PYTHON) tools/analysis_tools/demo_spread.py $(DEMO_CONFIG) --check $(DEMO_WORKDIR) --record-dir $(DEMO_SPREAD_RECORDS)

# the spread of a demo's metric: DEMO_CONFIG trained with 5 seeds at 1 and at 2 threads, one run at a time
# (tools/analysis_tools/demo_spread.py); the record into DEMO_SPREAD_RECORDS, where make demo's check reads it
demo-spread: install
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA)
	$(PYTHON) tools/analysis_tools/demo_spread.py $(DEMO_CONFIG) --seeds 0 1 2 3 4 --threads 1 2 \
		--record-dir $(DEMO_SPREAD_RECORDS) $(DEMO_SPREAD_ARGS)

clean:
	rm -rf work_dirs .pytest_cache
