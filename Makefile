# Set-up, tests and the demo. Every target runs inside .venv, which `make install` creates.
PYTHON       := .venv/bin/python
DEMO_CONFIG  ?= configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py
DEMO_WORKDIR ?= work_dirs/demo
DEMO_DATA    := data/shapes
PYTEST_ARGS  ?=
PEERS_DIR    ?=

.PHONY: install test test-slow kernels bench demo clean

install:
	@bash tools/install.sh

test: install
	TRITON_INTERPRET=1 PATH="$(CURDIR)/.venv/bin:$$PATH" $(PYTHON) -m pytest tests -m "not slow" $(PYTEST_ARGS)

test-slow: install
	TRITON_INTERPRET=1 PATH="$(CURDIR)/.venv/bin:$$PATH" $(PYTHON) -m pytest tests -m slow $(PYTEST_ARGS)

# every Triton kernel compiled ahead of time for sm_80 and sm_90 at every launch of the shipped models
kernels: install
	$(PYTHON) tools/analysis_tools/compile_kernels.py --arch sm_80 sm_90 --out-dir work_dirs/compile_kernels

# the README's side-by-side tables (about 20 minutes on 2 cores); PEERS_DIR=... adds the official modules
bench: install
	$(PYTHON) tools/analysis_tools/benchmark_suite.py $(if $(PEERS_DIR),--peers $(PEERS_DIR)) \
		--out-dir work_dirs/bench --readme README.md

demo: install
	@start=$$(date +%s); \
	$(PYTHON) tools/misc/make_demo_data.py --out $(DEMO_DATA) && \
	$(PYTHON) tools/train.py $(DEMO_CONFIG) --work-dir $(DEMO_WORKDIR) && \
	$(PYTHON) tools/test.py $(DEMO_CONFIG) $$(cat $(DEMO_WORKDIR)/last_checkpoint) --work-dir $(DEMO_WORKDIR) \
		--show-dir predictions && \
	$(PYTHON) tools/misc/montage.py $(DEMO_WORKDIR) --pattern '*/predictions/*' \
		--caption 'each pair: ground truth (left) | prediction (right)' --out $(DEMO_WORKDIR)/demo_predictions.png && \
	echo "demo finished in $$(( $$(date +%s) - start )) s; metrics above, predictions in $(DEMO_WORKDIR)/demo_predictions.png"

clean:
	rm -rf work_dirs .pytest_cache
