# Quick start (see README.md):
#   make demo    installs everything into .venv, builds, runs the demo (on aclsim without an NPU)
#   make test    runs the test suite
# Other targets: install, bench, doctor, lint, sdist, clean, compat (TORCH_NPU=2.7.1: builds and tests
# against another torch_npu release in build/compat-VERSION/, about 5 GB of downloads), jitter (the
# plugin's tests with random device delays: a race finder, not part of CI).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
TORCH_NPU ?= 2.7.1
TEST_JOBS ?= 2

.PHONY: demo test jitter install bench doctor lint sdist clean compat

demo: install
	ACLSIM_DEVICES=$${ACLSIM_DEVICES:-4} $(PY) -m torch_npu_ipc.demo

# Two parts of the suite side by side (tools/run_tests.py): each keeps about
# one core busy. TEST_JOBS=1 runs one plain pytest.
test: install
	$(PY) tools/run_tests.py --jobs $(TEST_JOBS) test $(PYTEST_ARGS)

# The plugin's tests with up to ACLSIM_JITTER_US (default 2000) of random device time before each
# stream task (docs/simulator.md, Finding races): a test or a feature that relies on the luck of two
# unordered streams fails here. About 5 minutes per task-queue mode on 2 cores; not part of CI.
jitter: install
	ACLSIM_JITTER_US=$${ACLSIM_JITTER_US:-2000} $(PY) tools/run_tests.py --jobs $(TEST_JOBS) test/plugin \
		-m "not mode_independent" $(PYTEST_ARGS)

install: $(STAMP)

$(STAMP): setup.py requirements.txt $(shell find csrc tools -name '*.cpp' -o -name '*.h' -o -name '*.py' 2>/dev/null)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-build-isolation -e .
	touch $(STAMP)

bench: install
	$(PY) -m torch_npu_ipc.bench

doctor: install
	$(PY) -m torch_npu_ipc doctor

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@# C and C++ lines stay within 120 columns (the sources are ASCII).
	@! LC_ALL=C grep -rnE '^.{121,}' csrc --include='*.c' --include='*.cpp' --include='*.h' || \
		{ echo "lint: the C/C++ lines above are longer than 120 columns"; exit 1; }

sdist: install
	$(PY) -m pip install --quiet build
	$(PY) -m build --sdist --no-isolation

clean:
	rm -rf build dist *.egg-info aclsim/lib torch_npu_ipc/*.so

compat:
	$(PYTHON) tools/compat.py $(TORCH_NPU) -- $(PYTEST_ARGS)
