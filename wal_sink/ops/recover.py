"""``wal-sink recover``: the job's start-up path without Spark. Take the lease
(fencing a running job of the sink), hold I7 the other way round as the job does
(a batch Spark committed above everything the WAL and the ack table know was staged
into a WAL that is gone: refused), then apply every staged batch without an ack, in
batch order (protocol/recovery.py)."""

from __future__ import annotations

from wal_sink.ops.spark_commit_log import committed_before_start
from wal_sink.protocol.committer import CommitResult
from wal_sink.protocol.recovery import check_commit_log
from wal_sink.protocol.sink_instance import SinkInstance


def recover_sink(sink: SinkInstance) -> list[CommitResult]:
    """The batches recovery applied, in order; none when every staged batch has
    an ack. Raises CheckpointResetError when Spark's commit log is ahead."""
    committed = committed_before_start(sink.config)  # before the lease and the WAL
    sink.start()
    if committed is not None:
        check_commit_log(sink.sink_id, *committed, sink.known)
    return sink.recover()
