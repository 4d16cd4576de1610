# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
PIP := .venv/bin/pip

.PHONY: demo check test test-all bench gpu-check gpu-wheels gpu-tree-slim gpu-tree-full clean

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

# the inner loop, under 90 s: lint, formatting, the import contracts, and the tests that train nothing and start no
# process (not `long`: tests/conftest.py); `make test` before a commit that trains or launches anything
check: .venv/.installed-test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports
	$(PY) -m pytest -q -m "not slow and not long" -n auto --maxprocesses 4

test: .venv/.installed-test
	$(PY) -m pytest -q -m "not slow" $(XDIST) --durations=15

test-all: .venv/.installed-test
	$(PY) -m pytest -q $(XDIST) --durations=15

bench: .venv/.installed-test
	$(PY) cli.py bench

# on a GPU machine with a network: under 8 minutes, writes experiments/bench/results/gpu/ (`--dry` checks it on a CPU)
gpu-check: .venv/.installed-test
	$(PY) -m experiments.bench.gpu_check

# for the lent GPU machine (no network, its own python3): the wheels it lacks, into .wheels/gpu/ (git ignores it),
# checked against every import of the check; there, `scripts/gpu_check_device.sh` runs it (README, "On a GPU")
gpu-wheels: .venv/.installed
	$(PY) -m experiments.bench.device_wheels check

# a device call carries at most 64 MiB: the studies' committed results (about 100 MiB) out of the working tree
# for it (git sparse checkout; index and history untouched), and back
gpu-tree-slim: .venv/.installed
	$(PY) -m experiments.bench.device_wheels slim

gpu-tree-full: .venv/.installed
	$(PY) -m experiments.bench.device_wheels full

clean:
	rm -rf runs .pytest_cache
