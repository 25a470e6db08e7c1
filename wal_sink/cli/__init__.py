"""The `wal-sink` operations CLI (click). Never imports pyspark."""
