# Set-up and entry points. `make test` and `make demo` work on a fresh machine:
# they create .venv/ (and .venv-delta/, the Spark-side reader of the WAL), install
# the Python packages, fetch the JVM jars with Maven and install MariaDB from Debian
# when `mariadbd` is missing. Each set-up step prints one line; the tools' own output
# is in var/setup.log.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DELTA_VENV := .venv-delta
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian's Maven 3.8.7 (jansi 2.4) writes ESC[0m at start and exit even in batch mode
# with -Dstyle.color=never; jansi.noreset stops it, so var/setup.log has no escapes.
MVN := MAVEN_OPTS="$$MAVEN_OPTS -Djansi.noreset=true" mvn -B -q -Dstyle.color=never \
  -s .mvn/settings.xml
STEP := devtools/step

.PHONY: setup venv venv-delta jars mariadb promtool lint docs test test-unit fuzz demo bench clean

setup: venv venv-delta jars mariadb promtool

venv: $(VENV)/.installed
$(VENV)/.installed: setup.cfg pyproject.toml
	@$(STEP) venv sh -c '$(PYTHON) -m venv $(VENV) && \
	  $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e ".[test,docs]" --config-settings editable_mode=compat'
	@touch $@

# delta-spark supports pyspark <= 4.2 only: a second, small virtualenv holds it, for
# the test that reads the WAL from Spark the way users query it (tests/interop).
venv-delta: $(DELTA_VENV)/.installed
$(DELTA_VENV)/.installed: devtools/delta-reader-requirements.txt
	@$(STEP) venv-delta sh -c '$(PYTHON) -m venv $(DELTA_VENV) && \
	  $(DELTA_VENV)/bin/pip install -q -r devtools/delta-reader-requirements.txt'
	@touch $@

# Jars go to .jars/; spark-defaults.conf of the virtualenv's pyspark then puts them
# on the driver's classpath at launch, for `python` and `spark-submit` alike, and
# conf/log4j2.properties beside it keeps Spark's INFO out of the job's output. The
# Kafka connector is taken at pyspark's own version when Maven Central has it, and
# hadoop-aws (S3A) at the Hadoop version pyspark bundles.
jars: $(VENV)/.jars-configured
$(VENV)/.jars-configured: pom.xml conf/log4j2.properties $(VENV)/.installed
	@rm -rf .jars
	@$(STEP) jars sh -c 'v=$$($(PY) -c "import pyspark; print(pyspark.__version__)"); \
	  $(MVN) -Pspark -Dspark.version=$$v dependency:copy-dependencies \
	  || { echo "Kafka connector $$v is not on Maven Central; using the pom default"; \
	       $(MVN) -Pspark dependency:copy-dependencies; } && \
	  $(MVN) -Ps3a -Dhadoop.version=$$($(PY) -m wal_sink.spark.defaults --hadoop-version) dependency:copy-dependencies && \
	  $(MVN) -Pdelta dependency:copy-dependencies && \
	  $(MVN) -Pbroker dependency:copy-dependencies && \
	  $(MVN) -Ps3proxy dependency:copy-dependencies && \
	  $(PY) -m wal_sink.spark.defaults .jars/spark'
	@touch $@

mariadb:
	@command -v mariadbd >/dev/null || command -v /usr/sbin/mariadbd >/dev/null || \
	  $(STEP) mariadb sh -c '$(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    mariadb-server mariadb-client'

# promtool checks and tests conf/alerts.yml (tests/integration/test_alert_rules.py).
# When it is not on PATH, only it is taken from Debian's prometheus package into
# .tools/; the package itself (a service) is never installed.
promtool:
	@command -v promtool >/dev/null || [ -x .tools/promtool ] || \
	  $(STEP) promtool sh -c 'd=$$(mktemp -d) && cd $$d && \
	    { apt-get download prometheus || { $(SUDO) apt-get update -qq && \
	      apt-get download prometheus; }; } && dpkg-deb -x prometheus_*.deb x && \
	    mkdir -p $(CURDIR)/.tools && cp x/usr/bin/promtool $(CURDIR)/.tools/ && \
	    rm -rf $$d'

lint: venv docs
	@$(PY) -m ruff check wal_sink pyspark_wal_sink jobs tests bench devtools
	@$(VENV)/bin/lint-imports --no-cache

# The documentation site (docs/, mkdocs.yml) into var/site, in strict mode: a broken
# link, a missing page or a failing generated reference fails the build (and lint).
docs: venv
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m devtools.demo

# Two workers, each with its own MariaDB (and SparkSession, Kafka broker when its
# tests need them): most of a test's time is a JVM starting or a job waiting for
# data, so two share two cores well. A file runs whole on one worker (its database
# and servers are the module's), in the order pytest collects them.
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-unit: venv
	$(PY) -m pytest tests/unit

# The model fuzzer, randomized, for FUZZ_MINUTES (default 10) or until its first
# failure, which it shrinks and prints as a reproducer (the target's DDL, each sink's
# TOML, the batches' records, the steps). FUZZ_EXCLUDE=feature,... keeps features
# of the grammar out (tests/fuzzing/grammar.py); `make test` runs it derandomized.
# Its own --basetemp: pytest runs elsewhere prune /tmp/pytest-of-$USER's older
# directories, the fuzz run's MariaDB datadir among them.
FUZZ_MINUTES ?= 10
fuzz: venv
	@mkdir -p var
	FUZZ_PROFILE=fuzz FUZZ_MINUTES=$(FUZZ_MINUTES) $(PY) -m pytest \
	  tests/integration/test_model_fuzz.py -x -s -p no:cacheprovider --timeout=0 \
	  --basetemp=var/fuzz

# Benchmarks print ratios against a baseline measured in the same run (bench/).
bench: setup
	$(PY) -m bench.commit_ratio
	$(PY) -m bench.commit_ratio_tables
	$(PY) -m bench.catch_up
	$(PY) -m bench.end_to_end_ratio
	$(PY) -m bench.micro_batch_cost
	$(PY) -m bench.staging_ratio
	$(PY) -m bench.staging_ratio_s3
	$(PY) -m bench.driver_memory
	$(PY) -m bench.status_latency
	$(PY) -m bench.ack_table_latency
	$(PY) -m bench.follow_poll

clean:
	rm -rf $(VENV) $(DELTA_VENV) .jars .tools var .pytest_cache
