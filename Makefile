# k_transform: every target sets itself up on a fresh machine with Python 3.11.
#
#   make demo    install, then run the demo (an MLP, then examples/lenet_mindspore.py)
#   make test    install, then run the test suite
#
# `install` is quick the second time: a stamp file records that `.venv` holds
# this pyproject.toml's dependencies, and is rebuilt only when that file changes.

PYTHON3 ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SOURCES := k_transform tests bench examples

.PHONY: install test lint format demo bench fuzz clean

install: $(STAMP)

$(PY):
	$(PYTHON3) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --disable-pip-version-check -e '.[test,demo]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -n auto --dist worksteal

lint: install
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)

format: install
	$(VENV)/bin/ruff check --fix $(SOURCES)
	$(VENV)/bin/ruff format $(SOURCES)

demo: install
	$(PY) -m k_transform.demo
	@printf '\n%s\nPart 2: a MindSpore LeNet-5 script run by k_transform (examples/lenet_mindspore.py)\n\n' \
		'========================================================================'
	$(PY) examples/lenet_mindspore.py --plot lenet_loss.png

fuzz: install
	mkdir -p .fuzz && rm -f .fuzz/last.jsonl
	KT_FUZZ_LOG=.fuzz/last.jsonl KT_FUZZ_EXAMPLES=$${KT_FUZZ_EXAMPLES:-5000} \
		$(PY) -m pytest -q -n auto -p no:cacheprovider tests/test_fuzz.py -k matches || true
	$(PY) -m tests.fuzz.report .fuzz/last.jsonl

bench: install
	@if [ -f bench/run.py ]; then \
		$(PY) -m bench.run; \
	else \
		echo "bench/run.py does not exist yet: nothing to run"; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
