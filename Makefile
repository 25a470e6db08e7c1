# Set-up and entry points. `make test` and `make demo` work on a fresh machine:
# they create .venv/, install the Python packages, fetch the JVM jars with Maven
# and install MariaDB from Debian when `mariadbd` is missing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
MVN := mvn -q -B -s .mvn/settings.xml

.PHONY: setup venv jars mariadb test test-unit demo bench clean

setup: venv jars mariadb

venv: $(VENV)/.installed
$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Jars go to .jars/; spark-defaults.conf of the virtualenv's pyspark then puts them
# on the driver's classpath at launch, for `python` and `spark-submit` alike.
jars: $(VENV)/.jars-configured
$(VENV)/.jars-configured: pom.xml $(VENV)/.installed
	rm -rf .jars
	$(MVN) -Pspark dependency:copy-dependencies
	$(MVN) -Pbroker dependency:copy-dependencies
	$(PY) -m wal_sink.spark_defaults .jars/spark
	touch $@

mariadb:
	@command -v mariadbd >/dev/null || command -v /usr/sbin/mariadbd >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq mariadb-server mariadb-client; }

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m devtools.demo

test: setup
	$(PY) -m pytest

test-unit: venv
	$(PY) -m pytest tests/unit

# Benchmarks print ratios against a baseline measured in the same run (bench/).
bench: setup
	$(PY) -m bench.commit_ratio
	$(PY) -m bench.end_to_end_ratio
	$(PY) -m bench.staging_ratio
	$(PY) -m bench.driver_memory
	$(PY) -m bench.status_latency

clean:
	rm -rf $(VENV) .jars var .pytest_cache
