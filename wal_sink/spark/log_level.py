"""How much of Spark's own logging the job shows: WARN and up by default.

Spark's INFO (thousands of lines, a progress JSON per trigger of each query) drowns
the sink's one line per batch. log4j2 reads its profile when the driver JVM starts,
before any Python runs, so being quiet from the first line takes a profile at WARN
on the driver's classpath: ``conf/log4j2.properties``, which ``make jars`` copies
into the virtualenv's pyspark conf dir ($SPARK_HOME/conf, on spark-submit's
classpath).

The job's level (``job.spark_log_level``, or ``--spark-log-level``) is set twice:

1. before the session starts, on the root logger of the JVM spark-submit started,
   so that with such a profile the start-up lines follow it (``INFO`` brings them
   all back);
2. once the session runs, with ``setLogLevel``: without the profile Spark loads its
   own default profile (INFO) when the session starts, and this makes the job
   quiet from then on — every batch's lines included.
"""

from __future__ import annotations

from pyspark import SparkContext


def set_root_level(level: str) -> None:
    """Step 1: the driver JVM's root log level, before any SparkContext exists."""
    SparkContext._ensure_initialized()  # the gateway to spark-submit's JVM
    jvm = SparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setRootLevel(log4j.Level.toLevel(level))
