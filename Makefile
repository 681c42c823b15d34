# fp4patch developer tasks. `make demo` and `make test` each work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
FLASHINFER_VERSION ?= 0.6.0
# torch 2.13.0 CPU lies on local disk here; FlashInfer's light import-time dependencies let the
# trace tests import the real package on CPU (installed without its CUDA-only dependencies).
TORCH_SPEC ?= torch==2.13.0

.PHONY: help demo test test-all test-property lint bench compat clean

help:
	@echo "make demo   - fresh venv + real flashinfer-python $(FLASHINFER_VERSION): status, diff, apply, verify, revert"
	@echo "make test   - install test dependencies into $(VENV) and run the test suite"
	@echo "make test-property - the long hypothesis run: 1000 formatting variants of the real targets (minutes)"
	@echo "make lint   - ruff + compile check"
	@echo "make bench  - CLI benchmarks, results in benchmarks/results/"
	@echo "make compat - sweep every flashinfer-python release (JOBS=2 at a time), writes docs/compatibility.md"

$(VENV)/.installed: pyproject.toml requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_SPEC)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

demo:
	bash scripts/demo.sh $(FLASHINFER_VERSION)

test: $(VENV)/.installed
	$(PY) -m pytest -q -m "not property_long" tests

# The property_long tests carry the hypothesis profile property-long (1000 examples; see tests/test_property_formatting.py).
test-property: $(VENV)/.installed
	$(PY) -m pytest -q -m property_long -p no:cacheprovider --hypothesis-show-statistics tests/test_property_formatting.py

test-all: $(VENV)/.installed
	$(PY) -m pytest -q tests

lint: $(VENV)/.installed
	$(PY) -m ruff check fp4patch tests
	$(PY) -m compileall -q fp4patch

# Speed and memory of the CLI on flashinfer-python 0.7.4 against grep/sed/patch; writes
# benchmarks/results/cli.json and prints the README table.
bench: $(VENV)/.installed
	$(PY) benchmarks/cli_bench.py --rounds $(ROUNDS)
ROUNDS ?= 11

# 2 releases at a time; `make compat JOBS=4` to change. Downloads go to $$FP4PATCH_CACHE.
JOBS ?= 2
compat: $(VENV)/.installed
	$(PY) -m fp4patch.compat -j $(JOBS) --output docs/compatibility.md

clean:
	rm -rf $(VENV) .demo build dist *.egg-info .pytest_cache
