# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: setup demo cluster-demo test test-docs bench bench-peers lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,uvloop]"
	touch $@ $(NATIVE)

# mypyc's build of the HTTP client's hot path (setup.py; the modules are named in
# asyncio_lookup/_native.py), in place: built again when one of their sources changes (--force:
# an unchanged C file would otherwise keep its old build, older than the source it came from)
NATIVE := $(VENV)/.native
NATIVE_SOURCES := setup.py asyncio_lookup/_native.py $(shell $(PYTHON) -c "import runpy; \
	print(*(n.replace('.', '/') + '.py' for n in runpy.run_path('asyncio_lookup/_native.py')['COMPILED']))")
$(NATIVE): $(VENV)/.installed $(NATIVE_SOURCES)
	$(PY) setup.py --quiet build_ext --inplace --force
	touch $@

setup: $(VENV)/.installed $(NATIVE)

# The tests' JVMs share one archive of Spark's classes: a session starts on half the CPU
# (tests/jvm_archive.py); built again with each install. Only a speed-up: the tests run (slower)
# without it if it cannot be built.
JVM_ARCHIVE := $(VENV)/spark-classes.jsa
$(JVM_ARCHIVE): $(VENV)/.installed tests/jvm_archive.py
	-$(PY) -m tests.jvm_archive $@

demo: setup
	$(PY) examples/quickstart.py

# A local Spark standalone master + worker; the wheel shipped as a zip on --py-files; stopped after.
cluster-demo: setup
	$(PY) examples/cluster/standalone.py

# On 3 pytest-xdist workers: classic Spark tests on one, Connect ones on another, the rest spread
# (tests/conftest.py); `$(PY) -m pytest` alone runs them one by one.
test: setup $(JVM_ARCHIVE)
	$(PY) -m pytest -q -n 3

# Every shell recipe of README.md and docs/*.md as written, and every example from the built
# wheel in a fresh venv outside the repository (tests/test_docs_shell.py; 4.5 min here, 9 under load).
test-docs: setup $(JVM_ARCHIVE)
	ASYNCIO_LOOKUP_DOCS_SHELL=1 $(PY) -m pytest -q tests/test_docs_shell.py

bench: setup
	$(PY) -m benchmarks all

# PyFlink (apache-flink 2.x, Java 17) in its own venv, then the same HTTP lookup in PyFlink's
# AsyncDataStream, Spark classic and Spark Connect side by side (benchmarks/peers.py).
PEERS_VENV := .venv-peers
$(PEERS_VENV)/.installed:
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet "apache-flink>=2,<3" aiohttp
	touch $@

bench-peers: setup $(PEERS_VENV)/.installed
	PEERS_PYTHON=$(abspath $(PEERS_VENV))/bin/python $(PY) -m benchmarks peers

lint: setup
	$(PY) -m ruff check asyncio_lookup tests examples benchmarks
	$(PY) -m mypy asyncio_lookup
	$(PY) -m mypy benchmarks

clean:
	rm -rf $(VENV) $(PEERS_VENV) .pytest_cache .mypy_cache build dist *.egg-info
	find asyncio_lookup -name '*.so' -delete
