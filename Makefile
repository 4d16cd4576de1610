# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
PIP := .venv/bin/pip

.PHONY: demo test test-all bench gpu-check clean

.venv/.installed: requirements.txt
	python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.txt
	touch $@

.venv/.installed-test: .venv/.installed requirements-test.txt
	$(PIP) install -q -r requirements-test.txt
	touch $@

demo: .venv/.installed
	$(PY) cli.py sweep experiments/demo.yaml --out runs/demo
	$(PY) cli.py samples runs/demo

# one pytest-xdist worker per core, each taking whole files (a file's fixtures are built once); see tests/conftest.py
XDIST := -n auto --maxprocesses 4 --dist loadfile

test: .venv/.installed-test
	$(PY) -m pytest -q -m "not slow" $(XDIST) --durations=15

test-all: .venv/.installed-test
	$(PY) -m pytest -q $(XDIST) --durations=15

bench: .venv/.installed-test
	$(PY) cli.py bench

# on a lent GPU, first: under 8 minutes, writes experiments/bench/results/gpu/ (`--dry` checks it on a CPU)
gpu-check: .venv/.installed-test
	$(PY) -m experiments.bench.gpu_check

clean:
	rm -rf runs .pytest_cache
