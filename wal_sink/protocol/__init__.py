"""The protocol that joins the WAL and MySQL (docs/protocol.md): the commit path —
the committer and its transaction, the row applier and its chunk paths, the outbox,
recovery, the committer thread behind Spark, the data source's stage commit, the
follower's loop. Never imports pyspark, the operator actions (ops/) or the CLI."""
