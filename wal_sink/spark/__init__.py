"""The Spark side: the foreachBatch sink, staging by executors, the streaming job,
its source, checkpoint, restarts and stop. The only layer that imports pyspark."""
