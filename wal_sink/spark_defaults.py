"""Set-up step: put the fetched jars on the driver's classpath at launch.

A builder's ``spark.jars`` set after ``spark-submit`` started the JVM is too late for
Delta's SQL extension, so ``make jars`` writes them, with Delta's session settings,
into ``spark-defaults.conf`` of the installed pyspark (its SPARK_HOME). Both
``python app.py`` and ``spark-submit app.py`` from the virtualenv then find them.

Usage: python -m wal_sink.spark_defaults JAR_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def write_defaults(jar_dir: Path) -> Path:
    jars = sorted(str(p.resolve()) for p in jar_dir.glob("*.jar"))
    if not jars:
        raise SystemExit(f"no jars in {jar_dir}: run `make jars`")
    conf_dir = Path(pyspark.__file__).parent / "conf"
    conf_dir.mkdir(exist_ok=True)
    target = conf_dir / "spark-defaults.conf"
    lines = [
        "# Written by `python -m wal_sink.spark_defaults` (make jars); do not edit.",
        f"spark.jars {','.join(jars)}",
        *(f"{k} {v}" for k, v in DELTA_SETTINGS.items()),
    ]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    print(f"wrote {write_defaults(Path(sys.argv[1]))}")
