# fp4patch developer tasks. `make demo` and `make test` each work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
FLASHINFER_VERSION ?= 0.6.0
# The torch the test venv gets. On an ordinary Linux machine torch==2.13.0 from the package
# registry is the CUDA build (several GB); the tests need only the CPU build:
#   make test TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# TORCH_INDEX_URL replaces the index for the torch install only (pip's --index-url: the registry is not
# asked for torch then, so where that index is out of reach, behind a firewall, pip ends "No matching
# distribution found for torch==2.13.0" and make says what to do); every other PIP_* variable
# (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS) reaches every pip call as usual.
# FlashInfer's light import-time dependencies let the trace tests import the real package on
# CPU (installed without its CUDA-only dependencies).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
TORCH_INDEX_HINT = make: $(TORCH_SPEC) was looked for only in TORCH_INDEX_URL=$(TORCH_INDEX_URL) (it replaces the package index for torch); where that index cannot be reached (a firewall, a proxy), leave TORCH_INDEX_URL out to take torch from the registry (its CUDA build, several GB, runs on CPU too) or name a mirror of the CPU index; then run make again
# tests/test_recipes.py gives it to the Dockerfile's torch install as an extra index
export TORCH_INDEX_URL

.PHONY: help demo dist test test-heavy test-releases test-recipes test-torch test-eras test-all test-property lint bench compat clean

help:
	@echo "make demo   - fresh venv + real flashinfer-python $(FLASHINFER_VERSION): status, diff, apply, verify, revert"
	@echo "make dist   - build fp4patch's wheel into $(DIST)/, to install where it is used (README: Install)"
	@echo "make test   - install test dependencies into $(VENV) and run the test suite"
	@echo "make test-heavy - the heavy tests make test leaves out (tests/heavy.txt; CI runs both)"
	@echo "make test-releases - every wheel release: apply, verify --trace, revert (after an op, probe or spec change)"
	@echo "make test-recipes - the Dockerfile, CI workflow, wheel and README install recipes end to end in fresh venvs, outside the checkout (CI runs it too)"
	@echo "make test-torch - the torch matrix: the torch_matrix tests under each torch of TORCH_MATRIX (cached venvs), the table in docs/compatibility.md"
	@echo "make test-eras - the fake checks on every release between 0.6.0 and 0.7.4 where an op's code differs (long)"
	@echo "make test-all - everything: make test, test-eras, the exhaustive matrices and the 1000-example property run"
	@echo "make test-property - the long hypothesis run: 1000 formatting variants of the real targets (minutes)"
	@echo "make lint   - ruff, the import contracts of docs/architecture.md (import-linter), mypy"
	@echo "make bench  - verify against a one-command typer app (target 1.5x), the other commands, import cost: benchmarks/results/"
	@echo "make compat - sweep every flashinfer-python release (JOBS=2 at a time): docs/compatibility.md and the catalog's evidence; then replay each wheel release as if unseen"

$(VENV)/.installed: pyproject.toml requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL) )'$(TORCH_SPEC)'$(if $(TORCH_INDEX_URL), || { echo "$(TORCH_INDEX_HINT)" >&2; exit 1; })
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# The wheel users install where fp4patch is used (a Docker build, a CI job, a pipx venv; README "Install"): fp4patch
# is not on the package registry. Built with pip's build isolation (hatchling from the registry), no venv needed;
# older fp4patch wheels in DIST are removed first, so examples/Dockerfile's COPY dist/fp4patch-*.whl finds one.
DIST ?= dist
dist:
	rm -f $(DIST)/fp4patch-*.whl
	$(PYTHON) -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir $(DIST) .
	@ls $(DIST)/fp4patch-*.whl

demo:
	PYTHON='$(PYTHON)' bash scripts/demo.sh $(FLASHINFER_VERSION)

# Tests run in TEST_JOBS pytest-xdist workers (auto: one per CPU core), spread test by test;
# tests marked xdist_group run in one worker (see tests/conftest.py). TEST_JOBS=0 runs in one process.
TEST_JOBS ?= auto
PYTEST_PARALLEL = -n $(TEST_JOBS) --dist loadgroup

test: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not property_long and not eras and not exhaustive and not recipe and not heavy and not releases and not matrix" tests

# The heavy tests (tests/heavy.txt: 6 s or more each, whole-pipeline checks in child interpreters); CI runs them
# after make test. `make test` and `make test-heavy` together are the suite CI runs on torch 2.13; the cells of the
# torch x FlashInfer table (marked matrix) run under make test-torch, every release on 2.13 under make test-releases.
test-heavy: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "heavy and not property_long and not eras and not exhaustive and not recipe and not releases and not matrix" tests

# Every wheel release of the catalog: apply, verify --trace (nested and direct), revert byte-identical
# (tests/test_every_release.py, marked releases; about a CPU-minute a release). Run it after changing an op, a probe
# or a spec (make compat traces the same and records it in the evidence, which tests/test_evidence_traced.py checks).
# RELEASES="0.7.2 0.7.2.post1" runs those only (CI: the engines' pins and a third of the rest, scripts/ci_releases.py).
RELEASES ?=
test-releases: $(VENV)/.installed
	FP4PATCH_RELEASES="$(RELEASES)" $(PY) -m pytest -q $(PYTEST_PARALLEL) -m releases tests

# The torch matrix (scripts/torch_matrix.py): for each torch release of TORCH_MATRIX, a venv of its own with that
# torch from the package registry (the CUDA build, run on CPU; TORCH_INDEX_URL picks another index), cached outside
# the checkout in FP4PATCH_TORCH_CACHE (5-7 GB each; identical files hard-linked across them), and the tests marked
# torch_matrix run under it; the results go to docs/torch-matrix.json and the torch x FlashInfer table of
# docs/compatibility.md. `make test-torch TORCH_MATRIX="2.10.0 2.15.0"` runs two. CI runs the range's two ends.
TORCH_MATRIX ?= 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.0 2.14.1 2.15.0
FP4PATCH_TORCH_CACHE ?= $(HOME)/.cache/fp4patch/torch
export FP4PATCH_TORCH_CACHE
test-torch: $(VENV)/.installed
	$(PY) scripts/torch_matrix.py run --python $(PYTHON) --jobs $(TEST_JOBS) $(if $(TORCH_INDEX_URL),--torch-index-url $(TORCH_INDEX_URL) )$(TORCH_MATRIX)

# The recipes end to end (marked `recipe`): the Dockerfile's build stage and the CI workflow's steps run
# as written from folders outside the checkout (the wheel of make dist; the git URL, pointed at a local repository),
# the README's install lines, the built wheel installed into a fresh venv; each installs into fresh venvs (minutes).
# CI (.ci/run) runs it after make test.
test-recipes: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m recipe tests

# Every release between 0.6.0 and 0.7.4 where an op's code differs: the per-era fake checks (tens of minutes).
test-eras: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m eras tests

# The property_long tests carry the hypothesis profile property-long (1000 examples; see tests/test_property_formatting.py).
test-property: $(VENV)/.installed
	$(PY) -m pytest -q -m property_long -p no:cacheprovider --hypothesis-show-statistics tests/test_property_formatting.py

test-all: $(VENV)/.installed
	$(PY) -m pytest -q $(PYTEST_PARALLEL) tests

# ruff; the subsystems' import contracts (import-linter, pyproject.toml's [tool.importlinter]); mypy over fp4patch/.
lint: $(VENV)/.installed
	$(PY) -m ruff check fp4patch tests tools
	$(VENV)/bin/lint-imports
	$(PY) -m mypy

# verify on a patched flashinfer-python 0.7.4 against a one-command typer app, alternating fresh processes (target:
# within 1.5x): benchmarks/results/verify.json. Then every command against grep/patch: benchmarks/results/cli.json.
# Then `import flashinfer`, patched against pristine on 0.6.0 and 0.7.4: benchmarks/results/import.json. Then how
# often Inductor stores a tensor that four custom ops read: benchmarks/results/inductor-stores.json.
bench: $(VENV)/.installed
	$(PY) benchmarks/verify_bench.py --rounds $(ROUNDS)
	$(PY) benchmarks/cli_bench.py --rounds $(ROUNDS)
	$(PY) benchmarks/import_bench.py --rounds $(ROUNDS)
	$(PY) benchmarks/inductor_stores.py
ROUNDS ?= 11

# 2 releases at a time; `make compat JOBS=4` to change. Downloads go to $$FP4PATCH_CACHE.
JOBS ?= 2
compat: $(VENV)/.installed
	$(PY) -m tools.compat -j $(JOBS) --output docs/compatibility.md
	$(PY) -m tools.compat --replay -j $(JOBS) --output docs/compatibility.md

clean:
	rm -rf $(VENV) .demo build dist *.egg-info .pytest_cache
