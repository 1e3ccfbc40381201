# rlkernels — specs in, per-platform kernel packages out.
# Every target sets up what it needs (a .venv) by itself.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GEN := $(PY) -m generator
PLATFORM ?= cpu

.PHONY: help generate check diff test test-fast clean

help:
	@echo "make generate   render generated/ from specs/ and templates/ (writes only changed files)"
	@echo "make check      fail if generated/ is not what the specs produce"
	@echo "make diff       show what 'make generate' would change"
	@echo "make test       run every test (generator, contracts, CPU package build)"

$(VENV)/.gen-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e .
	touch $@

$(VENV)/.test-stamp: $(VENV)/.gen-stamp pyproject.toml
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

generate: $(VENV)/.gen-stamp
	$(GEN) generate

check: $(VENV)/.gen-stamp
	$(GEN) check

diff: $(VENV)/.gen-stamp
	$(GEN) diff

test: $(VENV)/.test-stamp
	$(PY) -m pytest -q

test-fast: $(VENV)/.test-stamp
	$(PY) -m pytest -q -m "not slow"

clean:
	rm -rf .build dist build
