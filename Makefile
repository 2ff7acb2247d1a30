# Co-simulation of a systolic-array GEMM accelerator. `make help` lists targets and variables.
# Every target that runs Python first creates .venv and installs the pinned packages (once).

PYTHON  ?= python3
VENV    ?= .venv
MODEL   ?= resnet
CONFIG  ?= default
BACKEND ?= rtl
SEED    ?= 0
JOBS    ?= auto
PYTEST_ARGS ?=
CONFIGS ?=
BENCH_FULL ?= 1
BENCH_SIZES ?= 8,16,32,64
WAVES   ?=
WAVE_LAYER  ?=
WAVE_INSN   ?=
WAVE_CYCLES ?=
WAVE_SIGNALS ?=
CALIB_METHOD ?=
HOOKS   ?=
DRAM_STALL ?=
COVERAGE_DIR ?= build/coverage
# `make fuzz`: the fuzz modules (add yours here), FUZZ_CASES (the executable module's count; the
# others run a share of it: special files 20%, non-finite numbers 10%, full disks 5%, signals 2%)
# and the seed; `make test` runs the same modules on their small default sample.
FUZZ_MODULES ?= tests/fuzz/test_executable_fuzz.py tests/fuzz/test_special_files_fuzz.py \
	tests/fuzz/test_non_finite_fuzz.py tests/fuzz/test_full_disk_fuzz.py tests/fuzz/test_signal_fuzz.py
FUZZ_CASES ?= 1000
FUZZ_SEED ?= 44
# The RTL tests `make coverage` runs on instrumented builds: instruction and network tests on the
# tiny config through cocotb (the 16x16 ones, the waveform, pyverilator, hook and Dask-shard variants
# run the same RTL paths on other builds and would double its time; docs: tests/README.md). The
# norm unit's test needs a build of its own (tiny with norm_unit, 3-4 min cold): left out to keep
# CI within its budget; `make coverage COVERAGE_TESTS=tests/instruction/test_norm_rtl.py` covers it.
# So are the DMA sweep's two variant configs (builds of their own whose rows the report lists
# apart from tiny's; tiny's line and toggle totals do not depend on them). Of the networks,
# EfficientNet (its depthwise, SE-gate and table-activation paths are also those of test_dwconv,
# test_accum_gate and test_store_table) and three of the four encoder-block shapes are left out
# too: about 70 s of the run, for CI's 45-minute budget.
COVERAGE_TESTS ?= tests/instruction tests/network -m simulator \
	-k "not default and not 16x16 and not pyverilator and not waves and not wave and not shard and not layer_range and not killed and not harnesses and not hook and not norm and not tiny_lat and not efficientnet and not 9-12-3 and not 7-16-4 and not 5-8-2"

# They reach Python only as command-line options: exported, `WAVES` is a yes/no flag to cocotb.
unexport PYTHON VENV MODEL CONFIG BACKEND SEED JOBS PYTEST_ARGS CONFIGS BENCH_FULL BENCH_SIZES BUNDLE IMAGE
unexport TOKENS IMAGE_SIZE WAVES WAVE_LAYER WAVE_INSN WAVE_CYCLES WAVE_SIGNALS CALIB CALIB_METHOD
unexport PREPROCESS EVAL PROMPT GENERATE TOP_K DECODE BATCH
unexport LAYERS MODELS HOOKS DRAM_STALL COVERAGE_DIR COVERAGE_TESTS MUTANTS MUTATE_SETS
unexport FUZZ_MODULES FUZZ_CASES FUZZ_SEED

PY    := $(VENV)/bin/python
# A value as one shell word, whatever quotes it holds: q = '...' with each ' written '\''
q = '$(subst ','\'',$(1))'
# With BUNDLE, a config is passed only when the user set one (the executable carries its own).
SIM_CONFIG = $(if $(filter-out file,$(origin CONFIG)),--config $(call q,$(CONFIG)))
# MODEL beside BUNDLE reaches the command line, which refuses the pair (nothing given is dropped).
SIM_MODEL = $(if $(filter-out file,$(origin MODEL)),--model $(call q,$(MODEL)))
# JOBS is pytest-xdist's for 'test' (default auto); 'sim' gets it only when the user set it.
SIM_JOBS = $(if $(filter-out file,$(origin JOBS)),--jobs $(call q,$(JOBS)))
STAMP := $(VENV)/.cosim-installed
DOCS_STAMP := $(VENV)/.docs-installed

.DEFAULT_GOAL := help
.PHONY: help venv toolchain test test-long test-fast fuzz coverage mutate mutate-slice sim sweep fixtures bench bench-decode bench-scaling waves timeline rtl synth lint docs docs-check format lock clean distclean

help: ## List targets and variables
	@echo "Targets:"
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  %-12s %s\n", $$1, $$2}'
	@echo "Variables (current value):"
	@echo "  MODEL=$(MODEL)      model for 'sim': resnet|resnet18|resnet34|resnet50|mobilenetv2|efficientnet|squeezenet|googlenet|unet|vit|bert|cnn|mlp|digits|chargpt|path/to/model.onnx"
	@echo "  BUNDLE=...       'sim': run a saved executable (build/runs/<run>/<model>.cosim) instead of MODEL"
	@echo "  CONFIG=$(CONFIG)    accelerator config: preset name (tiny, default), default_norm (default + norm unit) or a .json file (BUNDLE: its own)"
	@echo "  BACKEND=$(BACKEND)      'sim' backend: rtl (Verilator + cocotb), pyverilator (same RTL, in-process) or isa (numpy ISA simulator)"
	@echo "  SEED=$(SEED)          seed for generated inputs and weights"
	@echo "  IMAGE=...        input for 'sim': .npy (input-shaped), an image (png/jpg/...; any mode; resized, center-cropped) or a folder of images"
	@echo "  TOKENS=...       token ids for 'sim' of a text model: .npy (T,) or (1, T), or .npz by input name (default: seeded ids, a mask with a padded tail); with GENERATE and a model of ids alone (GPT-2 as exported): the prompt, 1 to T ids"
	@echo "  PREPROCESS=...   images of IMAGE/CALIB: imagenet|unit|none (default unit for digits and 1-channel models, else imagenet)"
	@echo "  CALIB=...        calibration inputs for 'sim': a .npy batch (N, *input shape) or a folder of images"
	@echo "  CALIB_METHOD=...  activation ranges: minmax (default)|percentile[:P]|entropy|mse"
	@echo "  EVAL=N           'sim' of a trained model: the first N held-out images (digits; default all) or text windows (chargpt; default 16); 0: none"
	@echo "  PROMPT=...       'sim' of a language model (chargpt) with GENERATE: the text to continue"
	@echo "  GENERATE=N       'sim' of a language model: generate N characters after PROMPT (ids after TOKENS for a model of ids alone) on BACKEND (prefill, then a decode launch each with a KV cache in DRAM), checked bit-exact"
	@echo "  TOP_K=K          with GENERATE: sample each character from the K likeliest (seeded by SEED; default greedy)"
	@echo "  DECODE=MODE      with GENERATE: kv_cache (default) or recompute (a full forward pass per character)"
	@echo "  BATCH=B          with GENERATE and the KV cache: decode B sequences of PROMPT together, each weight read once a step for all B (sequence b samples with SEED+b)"
	@echo "  IMAGE_SIZE=...   input height/width of zoo CNNs for 'sim' (default 224, at most 1024)"
	@echo "  JOBS=$(JOBS)       'test': pytest-xdist workers; 'sim': N layer shards run in parallel on Dask (default 1, sequential)"
	@echo "  LAYERS=...       'sim': run only these layers from their checkpoint: a name, a:b of names or of indices"
	@echo "  PYTEST_ARGS=...  extra pytest arguments, e.g. PYTEST_ARGS='-k dot_product'"
	@echo "  CONFIGS=...      presets 'rtl' and 'synth' process (default: all); 'sweep': comma-separated configs, e.g. tiny,rows=8,tiny+dram_bytes_per_cycle=4"
	@echo "  MODELS=...       'sweep': comma-separated models (default cnn,mlp; BACKEND defaults to isa there)"
	@echo "  BENCH_FULL=$(BENCH_FULL)    'bench': 1 also runs ResNet-18 and ResNet-50 224x224 end to end (ResNet-50 also in 2 shards), 0 skips them"
	@echo "  BENCH_SIZES=$(BENCH_SIZES)    'bench', 'bench-scaling': array sizes of the scaling table (empty: 'bench' skips it)"
	@echo "  BENCH_STEPS=...  'bench-scaling': of generate,build,run,synth (default generate,build,run; synth: the area estimate per size)"
	@echo "  WAVES=...        'sim' waveform format: fst (or 1) or vcd; implied (fst) by a WAVE_* window"
	@echo "  WAVE_LAYER=...   'sim': trace only this layer (a name from the listing, e.g. layer3.0.conv1)"
	@echo "  WAVE_INSN=a:b    'sim': trace only instructions a..b-1 (indices from the listing)"
	@echo "  WAVE_CYCLES=a:b  'sim': trace only accelerator cycles a..b-1 (the report's cycle windows)"
	@echo "  WAVE_SIGNALS=... 'sim': signals dumped: default (units' state, handshakes, counters), all, or globs (dut.accel.load.*)"
	@echo "  HOOKS=...        'sim' (rtl) and 'test': cocotb hook modules attached to every RTL program, e.g. sim.hook_examples.dram_bursts"
	@echo "  DRAM_STALL=...   'sim' (rtl, pyverilator) and 'test': the testbench DRAM's back-pressure: none|light|heavy|bursty ('test': [:seed]; 'sim': seeded by SEED)"
	@echo "  COVERAGE_DIR=$(COVERAGE_DIR) 'coverage': where counts and the report go"
	@echo "  COVERAGE_TESTS=... 'coverage': the pytest selection it runs (default: tiny-config RTL tests of tests/instruction and tests/network)"
	@echo "  FUZZ_CASES=$(FUZZ_CASES) FUZZ_SEED=$(FUZZ_SEED) 'fuzz': executable mutations (other modules: a share) and their seed (FUZZ_MODULES: the modules)"
	@echo "  MUTANTS=a,b      'mutate': only these curated mutant ids (python -m mutation --list); MUTATE_SETS=rtl,norm,harness,python"
	@echo "  MUTATE_SEED=...  'mutate-slice': the sample's seed (printed by every slice; default: a fresh one)"
	@echo "  MUTATE_RECHECK=0.1 'mutate': the share of kept kills measured again (a flip fails the run)"
	@echo "  PYTHON=$(PYTHON)   interpreter used to create $(VENV) (Python >= 3.10)"

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 10) else f"error: Python >= 3.10 needed, $(PYTHON) is {v.major}.{v.minor}; set PYTHON=python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { echo "error: cannot create $(VENV): apt-get install -y python3-venv"; exit 1; }
	@echo "installing pinned packages into $(VENV) (first run only)..."
	@$(PY) -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[dev]'
	@touch $@

venv: $(STAMP) ## Create .venv with the pinned packages (other targets do this by themselves)

toolchain: $(STAMP) ## Check g++/make/perl and Verilator, build the FST libraries; print what will be used
	@$(PY) -m sim.verilate.toolchain

test: $(STAMP) ## Run the whole regression (unit, block, instruction, network) - what CI runs
	@$(PY) -m sim.verilate.toolchain --quiet
	$(if $(HOOKS),COSIM_HOOKS=$(call q,$(HOOKS)) )$(if $(DRAM_STALL),COSIM_DRAM_STALL=$(call q,$(DRAM_STALL)) )$(PY) -m pytest -n $(JOBS) -m "not long and not docs_run" $(PYTEST_ARGS)

test-long: $(STAMP) ## Signals and scale-out failures end to end (SIGTERM/SIGKILL, Ctrl-C of JOBS=2, SLURM stand-in, sweep), ~2 min
	$(PY) -m pytest -n $(JOBS) -m long $(PYTEST_ARGS)

fuzz: $(STAMP) ## Fuzz campaigns: damaged executables (FUZZ_CASES, 1,000), special files, non-finite numbers, full disks, signals
	COSIM_FUZZ_CASES=$(call q,$(FUZZ_CASES)) COSIM_FUZZ_SEED=$(call q,$(FUZZ_SEED)) $(PY) -m pytest -n $(JOBS) $(FUZZ_MODULES) $(PYTEST_ARGS)

coverage: $(STAMP) ## RTL tests on instrumented builds -> per-module line/toggle + functional coverage, build/coverage/
	@$(PY) -m sim.verilate.toolchain --quiet
	@rm -rf $(COVERAGE_DIR)/dat $(COVERAGE_DIR)/functional
	@COSIM_COVERAGE=$(call q,$(abspath $(COVERAGE_DIR))) $(PY) -m pytest -n $(JOBS) $(COVERAGE_TESTS) $(PYTEST_ARGS); \
		status=$$?; $(PY) -m sim.coverage.report $(call q,$(COVERAGE_DIR)) && exit $$status

test-fast: $(STAMP) ## Run only the tests that need no simulator
	$(PY) -m pytest -n $(JOBS) -m "not simulator and not long and not docs_run" $(PYTEST_ARGS)

mutate: $(STAMP) ## Mutation testing, every set (RTL generator, harness, Python) -> build/mutation/report.json
	@$(PY) -m sim.verilate.toolchain --quiet
	$(PY) -m mutation $(if $(MUTANTS),--only $(call q,$(MUTANTS))) $(if $(MUTATE_SETS),--sets $(call q,$(MUTATE_SETS)))

mutate-slice: $(STAMP) ## A seeded sample of the mutation sets in a few minutes (CI); MUTATE_SEED=<seed> reruns one
	@$(PY) -m sim.verilate.toolchain --quiet
	$(PY) -m mutation --slice

sim: $(STAMP) ## Compile MODEL and run it on BACKEND, layer-by-layer bit-exact check and report
	@$(PY) -m sim.app.cli $(if $(BUNDLE),--bundle $(call q,$(BUNDLE)) $(SIM_CONFIG) $(SIM_MODEL),--model $(call q,$(MODEL)) --config $(call q,$(CONFIG))) \
		--backend $(call q,$(BACKEND)) --seed $(call q,$(SEED)) \
		$(if $(IMAGE),--image $(call q,$(IMAGE))) $(if $(TOKENS),--tokens $(call q,$(TOKENS))) $(if $(IMAGE_SIZE),--image-size $(call q,$(IMAGE_SIZE))) \
		$(if $(PREPROCESS),--preprocess $(call q,$(PREPROCESS))) $(if $(CALIB),--calib $(call q,$(CALIB))) \
		$(if $(CALIB_METHOD),--calib-method $(call q,$(CALIB_METHOD))) $(if $(EVAL),--eval $(call q,$(EVAL))) \
		$(if $(PROMPT),--prompt $(call q,$(PROMPT))) $(if $(GENERATE),--generate $(call q,$(GENERATE))) $(if $(TOP_K),--top-k $(call q,$(TOP_K))) $(if $(DECODE),--decode $(call q,$(DECODE))) $(if $(BATCH),--batch $(call q,$(BATCH))) \
		$(if $(WAVES),--waves $(call q,$(if $(filter 1 yes,$(WAVES)),fst,$(WAVES)))) \
		$(if $(WAVE_LAYER),--wave-layer $(call q,$(WAVE_LAYER))) $(if $(WAVE_INSN),--wave-insn $(call q,$(WAVE_INSN))) \
		$(if $(WAVE_CYCLES),--wave-cycles $(call q,$(WAVE_CYCLES))) \
		$(if $(WAVE_SIGNALS),--wave-signals $(call q,$(WAVE_SIGNALS))) \
		$(SIM_JOBS) $(if $(LAYERS),--layers $(call q,$(LAYERS))) $(if $(HOOKS),--hooks $(call q,$(HOOKS))) \
		$(if $(DRAM_STALL),--dram-stall $(call q,$(DRAM_STALL)))

sweep: $(STAMP) ## Run MODELS x CONFIGS on Dask (cached per cell) -> build/sweep/sweep.json, pareto.png
	@$(PY) -m sim.scaleout.sweep --models $(call q,$(or $(MODELS),cnn,mlp)) --configs $(call q,$(or $(CONFIGS),tiny,default)) \
		--backend $(call q,$(if $(filter-out file,$(origin BACKEND)),$(BACKEND),isa)) --seed $(call q,$(SEED))

waves: $(STAMP) ## Open the newest dump in waves/ in GTKWave with its save file (.gtkw)
	@$(PY) -m sim.waves.open

fixtures: $(STAMP) ## Every model of tests/fixtures/hf/ on the ISA simulator: bit-exact, cosine vs fp32, host steps, on CONFIG
	$(PY) tests/fixtures/hf/survey.py --config $(call q,$(CONFIG))

timeline: $(STAMP) ## Print the newest run's timeline.json and how to open it in Perfetto UI
	@$(PY) -m sim.app.open_timeline

bench: $(STAMP) ## Simulation speed: raw Verilator vs cocotb on the same RTL, builds, ResNet-18/50 -> build/bench/bench.json
	BENCH_FULL=$(BENCH_FULL) $(PY) -m sim.bench
	$(if $(BENCH_SIZES),$(PY) -m sim.bench.scaling --sizes $(BENCH_SIZES))

bench-decode: $(STAMP) ## chargpt decode with the KV cache at BATCH 1, 2, 4, 8, 16 (16x16 + norm unit, ISA): cycles, DRAM bytes, utilization -> build/bench/decode_batch.json
	$(PY) -m sim.app.decode_batch_bench

bench-scaling: $(STAMP) ## Array-size scaling only: generation, build, cycles/s, MACs/s, memory (area: BENCH_STEPS) per size -> build/bench/scaling.json
	$(PY) -m sim.bench.scaling --sizes $(BENCH_SIZES) $(if $(BENCH_STEPS),--steps $(call q,$(BENCH_STEPS)))

rtl: $(STAMP) ## Regenerate rtl/<config>/sim_top.v for the named configs (CONFIGS=tiny default)
	$(PY) -m hdl_gen.generate $(CONFIGS)

synth: $(STAMP) ## Area estimate per component (Yosys cells, FF/memory bits) -> rtl/<config>/area.md
	$(PY) -m hdl_gen.synth $(CONFIGS)

lint: $(STAMP) ## ruff, ruff format --check, mypy, the import layering contract (lint-imports)
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# pyproject's docs extra, at requirements.lock's pins (the project itself is installed already;
# reinstalling it for the extra would take a minute).
$(DOCS_STAMP): $(STAMP)
	@echo "installing the pinned docs packages into $(VENV) (first run only)..."
	@$(PY) -m pip install -q --disable-pip-version-check -c requirements.lock mkdocs
	@touch $@

docs-check: $(STAMP) ## Run every `make sim` command the docs show, for real (RTL ResNets and ViT: hours; not in CI)
	$(PY) -m pytest -n $(JOBS) -m docs_run tests/unit/project/test_docs_commands.py $(PYTEST_ARGS)

docs: $(DOCS_STAMP) ## Build the docs site (mkdocs.yml, docs/) with warnings as errors -> build/docs/index.html
	$(VENV)/bin/mkdocs build --strict --quiet

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

lock: $(STAMP) ## Regenerate requirements.lock from the current .venv
	@{ echo '# Transitive pins (pip constraints) for a reproducible .venv; regenerate with `make lock`.'; \
	   echo '# dask, distributed, dask-jobqueue and their dependencies (click, cloudpickle, msgpack, tornado, ...): the scale-out engine of sim/scaleout/cluster.py (layer shards, sweeps).'; \
	   echo '# pyucis (with mcp, pydantic, starlette, httpx, lxml, jsonschema, ...), lcov-cobertura, pycobertura (jinja2, tabulate, ruamel.yaml), cocotb-coverage (python-constraint): make coverage (sim/coverage/).'; \
	   echo '# mutmut and its dependencies (libcst, textual, setproctitle, coverage, ...): `make mutate`, mutation testing of the Python numeric code (mutation/python_set.py).'; \
	   echo '# mkdocs and its dependencies (ghp-import, mergedeep, mkdocs-get-deps, pyyaml_env_tag, watchdog): `make docs` only (pyproject'"'"'s docs extra).'; \
	   $(PY) -m pip freeze --exclude-editable | grep -v '^systolic-cosim'; } > requirements.lock

clean: ## Remove build outputs (Verilator builds, runs, dumps)
	rm -rf build waves/*.fst waves/*.vcd waves/*.gtkw waves/filters waves/.select

distclean: clean ## Also remove .venv
	rm -rf $(VENV)
