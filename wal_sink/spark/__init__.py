"""The Spark side: the foreachBatch sink and the ``wal_sink`` data source, staging
by executors, and the streaming job's Spark adapters (its session, source,
checkpoint, queries and SIGTERM handlers), which the job's supervisor (job/) drives.
The only layer that imports pyspark.

``WalSinkDataSource`` is exported for ``spark.dataSource.register(...)``; it is
imported on first use, so modules of this package stay cheap to import.
"""


def __getattr__(name: str):
    if name == "WalSinkDataSource":
        from wal_sink.spark.datasource import WalSinkDataSource

        return WalSinkDataSource
    raise AttributeError(name)
