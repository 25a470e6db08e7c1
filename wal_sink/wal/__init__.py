"""The WAL's storage: the Delta table and its files (delta-rs, pyarrow), and how
the job, the CLI and Spark reach it. Never imports the MySQL side or pyspark."""
