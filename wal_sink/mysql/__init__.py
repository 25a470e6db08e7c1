"""The MySQL side: the engine, the sink's tables, acks, the lease, the target's
preflight and the SQL that applies rows. Never imports the WAL side or pyspark."""
