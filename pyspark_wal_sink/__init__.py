"""wal_sink as a PySpark data source found without a register call.

PySpark looks for installed top-level modules whose name starts with ``pyspark_``
and registers the ``DefaultSource`` each exports, under its ``name()``: here
``wal_sink``, so ``df.writeStream.format("wal_sink")`` works in any session whose
Python has wal_sink installed (the Spark Connect server's included).
"""

from wal_sink.spark.datasource import WalSinkDataSource as DefaultSource

__all__ = ["DefaultSource"]
