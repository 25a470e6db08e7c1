"""Set-up step: put the fetched jars on the driver's classpath at launch, and
Spark's logging at WARN from JVM start.

A builder's ``spark.jars`` set after ``spark-submit`` started the JVM is too late for
a source such as Kafka on some paths, so ``make jars`` writes them into
``spark-defaults.conf`` of the installed pyspark (its SPARK_HOME). Both
``python app.py`` and ``spark-submit app.py`` from the virtualenv then find them.
The job needs no Delta jar: delta-rs commits the WAL.

Next to it goes ``log4j2.properties``, a copy of ``conf/log4j2.properties``:
spark-submit puts the conf dir on the driver's classpath, where log4j2 finds the
profile when the JVM starts (see wal_sink/spark_logging.py).

``--hadoop-version`` prints the Hadoop version pyspark bundles, at which ``make
jars`` fetches hadoop-aws (S3A).

Usage: python -m wal_sink.spark.defaults JAR_DIR | --hadoop-version
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

LOG4J2_PROFILE = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"


def write_defaults(jar_dir: Path) -> Path:
    jars = sorted(str(p.resolve()) for p in jar_dir.glob("*.jar"))
    if not jars:
        raise SystemExit(f"no jars in {jar_dir}: run `make jars`")
    conf_dir = Path(pyspark.__file__).parent / "conf"
    conf_dir.mkdir(exist_ok=True)
    target = conf_dir / "spark-defaults.conf"
    lines = [
        "# Written by `python -m wal_sink.spark.defaults` (make jars); do not edit.",
        f"spark.jars {','.join(jars)}",
    ]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (conf_dir / "log4j2.properties").write_text(
        LOG4J2_PROFILE.read_text(encoding="utf-8"), encoding="utf-8"
    )
    return target


def bundled_hadoop_version() -> str:
    """The Hadoop version of pyspark's own jars (hadoop-client-api-X.jar)."""
    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise SystemExit(f"no hadoop-client-api jar in {jars}")
    return found[-1].stem.rsplit("-", 1)[1]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    if sys.argv[1] == "--hadoop-version":
        print(bundled_hadoop_version())
    else:
        target = write_defaults(Path(sys.argv[1]))
        print(f"wrote {target} and log4j2.properties beside it")
