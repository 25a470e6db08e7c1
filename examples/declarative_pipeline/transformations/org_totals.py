"""The pipeline's flow: JSON order files dropped into the landing directory, added
into MySQL's per-org totals through the wal_sink data source.

A sink takes append flows only: each micro-batch's rows are staged as they are,
and what they do to the table (add, overwrite, keep; deletes with [cdc]) is the
wal_sink config's merge, applied by the follower.
"""

from pathlib import Path

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

LANDING = "/var/tmp/wal_sink_example/landing"
CONFIG = Path(__file__).resolve().parent.parent / "wal_sink.toml"

# Paths are read by the Spark driver, whose working directory is where
# spark-pipelines was started: give them whole.
dp.create_sink("org_totals", format="wal_sink", options={"config": str(CONFIG)})


# The flow's name (the function's) names its checkpoint: renaming it starts a new
# checkpoint at batch 0, which the sink refuses as a reset checkpoint.
@dp.append_flow(target="org_totals")
def orders() -> DataFrame:
    return (
        SparkSession.active()
        .readStream.schema("org STRING, amount DECIMAL(12,2)")
        .option("maxFilesPerTrigger", 1)  # a micro-batch per file: small batches
        .json(LANDING)
    )
