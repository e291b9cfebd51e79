# LLM internals from scratch. `make lab` and `make test` set up .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LESSONS := $(notdir $(wildcard solutions/[0-9]*))
PORT ?= 8888
JOBS ?= 2
# submissions graded at once by make autograde: auto = cores, capped by memory / 8 GiB per sandbox
GRADING_JOBS ?= auto
# Threads per test process and per notebook kernel: JOBS workers already fill the cores, and
# two processes each spinning 2 threads on 2 cores run several times slower than 1 thread each.
TEST_THREADS ?= 1
# Optional extra index for torch, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu on a
# CPU-only Linux machine (PyPI's torch wheel for Linux bundles CUDA, several GB).
TORCH_INDEX ?=
# pip's own find-links folders (pip config, PIP_FIND_LINKS), passed on to uv, which reads neither.
FIND_LINKS ?= $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null) $(PIP_FIND_LINKS)
# A class with nbgrader's exchange: COURSE_EXCHANGE=/path/to/exchange (nbgrader_config.py reads it). With it,
# `make lab` puts tools/exchange-jupyter/ first on JUPYTER_CONFIG_PATH: the Nbgrader menu with its Assignment
# List (fetch, submit, feedback), no Formgrader or Create Assignment; without it, no Nbgrader menu at all.
LAB_CONFIG_PATH := $(if $(COURSE_EXCHANGE),$(CURDIR)/tools/exchange-jupyter)
# nbgrader runs `alembic` from PATH when it creates a gradebook, so the venv must be on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help setup lab formgrader test test-fast lint release execute-solutions autograde feedback grades bench clean

help:
	@echo "make lab        open JupyterLab on the course (creates .venv on first run)"
	@echo "make formgrader JupyterLab for instructors, with the Formgrader"
	@echo "make test       the full suite (what CI runs)"
	@echo "make test-fast  unit and interop tests only"
	@echo "make release    regenerate notebooks/ from solutions/"
	@echo "make autograde  grade every submission in submitted/, GRADING_JOBS at once (default auto)"
	@echo "make feedback   feedback HTML with hidden tests stripped, plus grades.csv and grades-by-student.csv"
	@echo "make bench      run the benchmarks"

$(STAMP): pyproject.toml constraints.txt Makefile tools/jupyterlab-overrides.json $(wildcard tools/*-jupyter/*.json tools/*-jupyter/*/*.json)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs in about 20 s what pip takes a minute for; pip is the fallback where uv cannot be
	@# had. Both take the find-links folders of pip's own configuration (a local torch wheel, say).
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt uv >/dev/null 2>&1 || true
	@if [ -x $(BIN)/uv ] && $(BIN)/uv pip install --quiet --python $(BIN)/python -c constraints.txt \
		$(foreach d,$(FIND_LINKS),--find-links $(d)) \
		$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX) --index-strategy unsafe-best-match) -e ".[course,test]"; \
	then echo "installed with uv"; else \
		echo "installing with pip"; \
		$(BIN)/python -m pip install --quiet --no-compile --disable-pip-version-check -c constraints.txt \
			$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e ".[course,test]" || exit 1; fi
	@# Compiled here, on every core, not lazily: the grading sandbox mounts the venv read-only. Its
	@# status is ignored, as pip ignores it: some wheels ship files for newer Pythons only.
	@$(BIN)/python -m compileall -q -j 0 $(VENV)/lib >/dev/null 2>&1 || true
	$(BIN)/python -m ipykernel install --sys-prefix --name llm-course --display-name "LLM internals (.venv)"
	@# This JupyterLab only: no news pop-up, and no nbgrader course/assignment lists (they need an
	@# exchange; `make lab COURSE_EXCHANGE=DIR` turns the assignment list back on, see LAB_CONFIG_PATH).
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@cp tools/jupyterlab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@# Learners see no Formgrader and no "Create Assignment" sidebar (those extensions disabled and
	@# locked, the Formgrader's server extension off); `make formgrader` turns them back on for
	@# instructors (tools/instructor-jupyter/ goes first on JUPYTER_CONFIG_PATH). What `jupyter
	@# labextension disable/lock --level=sys_prefix` would write, copied: nine commands cost 15 s.
	@mkdir -p $(VENV)/etc/jupyter
	@cp -r tools/learner-jupyter/. $(VENV)/etc/jupyter/
	@touch $(STAMP)

setup: $(STAMP)
	@command -v bwrap >/dev/null 2>&1 || echo "note: bubblewrap (bwrap) is not installed: make autograde needs it to sandbox \
	submissions (Debian/Ubuntu: apt install bubblewrap)"

lab: $(STAMP)
	@echo "JupyterLab will print its URL below (open the one with /lab?token=...). Ctrl-C stops it."
	$(if $(LAB_CONFIG_PATH),JUPYTER_CONFIG_PATH="$(LAB_CONFIG_PATH)") $(BIN)/jupyter lab --no-browser --allow-root \
		--ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks

formgrader: $(STAMP)
	@echo "JupyterLab for instructors (Nbgrader menu, Formgrader, Create Assignment). Ctrl-C stops it."
	JUPYTER_CONFIG_PATH="$(CURDIR)/tools/instructor-jupyter" $(BIN)/jupyter lab --no-browser --allow-root \
		--ip=127.0.0.1 --port=$(PORT) --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/formgrader

lint: $(STAMP)
	$(BIN)/ruff check course_lib grader tests benchmarks tools
	$(BIN)/python tools/lint_tests.py tests solutions
	$(BIN)/python tools/lint_test_cells.py solutions/*/*.ipynb

test: $(STAMP) lint
	OMP_NUM_THREADS=$(TEST_THREADS) $(BIN)/python -m pytest -n $(JOBS) --dist loadscope -q --durations=25 tests solutions --nbval \
		--nbval-sanitize-with tests/notebooks/sanitize.cfg
	@echo "make test: all passed"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/grader tests/interop

release: $(STAMP)
	@for a in $(LESSONS); do $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; done
	@echo "notebooks/ regenerated from solutions/"

execute-solutions: $(STAMP)
	$(BIN)/python tools/execute_solutions.py $(LESSONS)

autograde: $(STAMP)
	$(BIN)/python -m grader autograde $(LESSONS) --jobs $(GRADING_JOBS) $(AUTOGRADE_FLAGS)

feedback: $(STAMP)
	$(BIN)/python -m grader feedback $(LESSONS)

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf autograded feedback gradebook.db grades.csv grades-by-student.csv .pytest_cache build .grading
