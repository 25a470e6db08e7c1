"""The operator actions the ``wal-sink`` CLI runs on a sink (docs/operations.md):
status, replay, purge, setting a batch aside, listing, retrying and purging
quarantined records, and reading Spark's commit log for ``recover``. Each plans
and runs on the commit path (protocol/) and returns what it found or did, for the
CLI to render; none prints. Never imports pyspark."""
