"""The batch's planning time is read from a local checkpoint's offset log without
the JVM (no SparkSession here): a path or a ``file:`` URI; a missing entry is None."""

from __future__ import annotations

import json

from wal_sink.spark.checkpoint import batch_timestamp_ms

# an offset log entry as Spark writes it: version, batch metadata, source offsets
ENTRY = 'v1\n{}\n{{"logOffset":3}}\n'


def test_planning_time_comes_from_a_local_offset_log_entry(tmp_path):
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1795529316288}
    (offsets / "3").write_text(ENTRY.format(json.dumps(metadata)))
    location = str(tmp_path / "checkpoint")
    for given in (location, location + "/", f"file:{location}", f"file://{location}"):
        assert batch_timestamp_ms(None, given, 3) == 1795529316288, given
    assert batch_timestamp_ms(None, location, 4) is None
