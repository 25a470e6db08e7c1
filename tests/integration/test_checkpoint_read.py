"""The batch's planning time, read once per batch from the checkpoint's offset log:
Hadoop decides where a checkpoint location is, and only one on the local file
system is read by Python directly (a path without a scheme is on HDFS when that
is the default file system)."""

from __future__ import annotations

import json

import pytest

from wal_sink.spark.checkpoint import PlanningTimes

# an offset log entry as Spark writes it: version, batch metadata, source offsets
ENTRY = 'v1\n{}\n{{"logOffset":3}}\n'
PLANNED = 1795529316288


@pytest.mark.parametrize("directory", ["checkpoint", "check point#1"])
def test_a_local_checkpoint_is_read_by_python(spark, tmp_path, directory):
    offsets = tmp_path / directory / "offsets"
    offsets.mkdir(parents=True)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": PLANNED}
    (offsets / "3").write_text(ENTRY.format(json.dumps(metadata)))
    location = str(tmp_path / directory)
    for given in (location, location + "/", f"file:{location}", f"file://{location}"):
        times = PlanningTimes(spark, given)
        assert times.local == location, given
        assert times(3) == PLANNED, given
        assert times(4) is None, given


def test_a_checkpoint_elsewhere_is_left_to_hadoop(spark):
    assert PlanningTimes(spark, "hdfs://localhost:1/checkpoint").local is None
