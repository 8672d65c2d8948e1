# One-command entry points (see README.md). Everything runs inside .venv.
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup browser study test test-fast lint bench time-to-quality

setup: $(VENV)/.installed

# torch==2.13.0 first: it is the local CPU build, and pyproject's torch range admits it,
# so pip does not pull the CUDA wheels.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

# The report's browser check drives the system Chromium (Debian package) with Playwright;
# no browser is downloaded.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
	  (echo "error: install Chromium (apt-get install chromium) for the report's browser check" >&2; exit 1)

study: setup          ## reproduce the whole study (dvc repro)
	dvc repro

test: setup browser   ## the full test suite, end-to-end tests included (what CI runs)
	python -m pytest

test-fast: setup      ## skip the slow end-to-end tests
	python -m pytest -m "not slow"

lint: setup
	ruff check pipeline stages tests benchmarks
	ruff format --check pipeline stages tests benchmarks

bench: setup          ## speed/memory benchmarks (not part of the tests)
	python -m benchmarks.run

# Time to quality: dev BLEU against minutes for our trainer, another revision's (--rev)
# and JoeyNMT (its own venv, JOEYNMT_VENV), two at a time, about 40 minutes;
# JoeyNMT runs beside a seed-2 copy of ours (the pairs go in order: 3 pairs of 6 runs);
# needs data/tok (`dvc repro tokenize`). Results: benchmarks/results/time_to_quality.md.
JOEYNMT_VENV ?= /work/joeynmt-venv
time-to-quality: setup  ## time-to-quality table with the JoeyNMT peer (not part of the tests)
	bash benchmarks/peer/joeynmt_setup.sh $(JOEYNMT_VENV)
	JOEYNMT_VENV=$(abspath $(JOEYNMT_VENV)) python -m benchmarks.time_to_quality --minutes 12 \
	  --rev 18c646f --set s2@additive:seed=2
