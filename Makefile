# One-command entry points (see README.md). Everything runs inside .venv.
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup browser study test test-fast lint bench time-to-quality

setup: $(VENV)/.installed

# torch first, the way PyTorch documents it: TORCH=cpu (default) takes the CPU-only wheel
# from PyTorch's CPU index, so pip does not pull the CUDA libraries; TORCH=cuda takes the
# default (CUDA) wheel; TORCH=local, whatever pip is configured with (a local wheel
# folder). TORCH_SPEC pins a version (e.g. TORCH_SPEC="torch==2.13.0").
TORCH ?= cpu
TORCH_SPEC ?= torch
# PYTHON: the interpreter .venv is made with (3.10-3.12).
PYTHON ?= python3
TORCH_INDEX_cpu := --index-url https://download.pytorch.org/whl/cpu
# CONSTRAINTS: a pip constraints file for both installs, e.g. the committed study's
# versions: `make setup CONSTRAINTS=constraints/study.txt` (with TORCH=cpu, the default).
CONSTRAINTS ?=
PIP_CONSTRAINTS := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(TORCH_INDEX_$(TORCH)) $(PIP_CONSTRAINTS)
	$(BIN)/python -m pip install -q -e ".[dev]" $(PIP_CONSTRAINTS)
	touch $@

# The report's browser check drives a system Chromium with Playwright (no browser is
# downloaded). Without one, those tests skip with a one-line reason; CI installs it
# (`make browser`, as root) and sets REQUIRE_BROWSER=1, which turns the skip into a failure.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
	  (echo "error: install Chromium (apt-get install chromium) for the report's browser check" >&2; exit 1)

# PRESET=quick: params.yaml from presets/quick.yaml first, the default study with the
# preset's keys over it (python -m tools.preset quick; git checkout params.yaml: back).
PRESET ?=
study: setup          ## reproduce the whole study (dvc repro); PRESET=name: a preset first
	$(if $(PRESET),python -m tools.preset $(PRESET))
	dvc repro

# TEST_WORKERS: pytest-xdist workers. The end-to-end tests spend much of their time waiting
# on the processes they start (Ray, DVC, MLflow), so four workers keep two cores busier than
# two do (docs/benchmarks.md, "The test suite"). Each test file runs whole on one worker
# (--dist loadfile), so a fixture a file shares (a Ray cluster) is built once, and the tiny
# study once per run for all workers; files start in the order pytest collects them, the
# end-to-end ones first (--no-loadscope-reorder). TEST_WORKERS=0: one process, no workers.
TEST_WORKERS ?= 4
PYTEST := python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup           ## the full test suite, end-to-end tests included (what CI runs)
	$(PYTEST)

test-fast: setup      ## skip the slow end-to-end tests
	$(PYTEST) -m "not slow"

LINTED := pipeline stages tests benchmarks scorers tools
lint: setup           ## what CI lints
	ruff check $(LINTED)
	ruff format --check $(LINTED)

bench: setup          ## speed/memory benchmarks (not part of the tests)
	python -m benchmarks.run

# Time to quality: dev BLEU against minutes for our trainer, a baseline revision of it
# (BASELINE_REV: by default the reference trainer, the commit whose dev BLEU sets the
# targets; any revision of this repository's history) and JoeyNMT (its own venv, JOEYNMT_VENV), two at a time,
# about 40 minutes;
# JoeyNMT runs beside a seed-2 copy of ours (the pairs go in order: 3 pairs of 6 runs);
# needs data/tok (`dvc repro tokenize`). Results: benchmarks/results/time_to_quality/.
JOEYNMT_VENV ?= .joeynmt-venv
BASELINE_REV ?= 18c646f4163407ee412635c6fbf3ef012d1ffaf3
time-to-quality: setup  ## time-to-quality table with the JoeyNMT peer (not part of the tests)
	bash benchmarks/peer/joeynmt_setup.sh $(JOEYNMT_VENV)
	JOEYNMT_VENV=$(abspath $(JOEYNMT_VENV)) python -m benchmarks.time_to_quality --minutes 12 \
	  --rev $(BASELINE_REV) --set s2@additive:seed=2
