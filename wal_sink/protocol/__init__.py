"""The protocol that joins the WAL and MySQL (docs/protocol.md): the committer and its
transaction, recovery, replay, purge, status, the committer thread behind Spark.
Never imports pyspark."""
