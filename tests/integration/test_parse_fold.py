"""Parse errors set aside inside the sink's own batches (stateless transforms): the
job runs one query, and a SIGKILL between staging a batch and recording its parse
errors loses none and records none twice. Stateful transforms keep the
parse-error query beside the sink's."""

from __future__ import annotations

import json
import signal
from decimal import Decimal

import pytest

from devtools.spark_job import JobProcess, job_env
from tests.helpers import fresh_table, landing_config, quarantined_raw, totals
from wal_sink.config import config_from_dict, load_config
from wal_sink.metrics import SinkMetrics
from wal_sink.protocol.stop_signal import StopSignal
from wal_sink.spark import job as job_module
from wal_sink.spark.foreach_batch_job import ForeachBatchPath
from wal_sink.spark.job import JobQueries
from wal_sink.spark.parse_errors import can_fold
from wal_sink.spark.source import read_source, streaming_frame
from wal_sink.wal.quarantine import Quarantine

BAD_LINES = ['{"k": "a", "amount": "lots"}', "not json at all", '{"k": "b", "a']


def test_parse_errors_killed_after_staging_are_quarantined_once(db, tmp_path):
    fresh_table(db, "folded")
    config = landing_config(db, tmp_path, "folded")  # 3 files, one per batch
    with open(tmp_path / "landing" / "f1.json", "a") as f:  # now the newest file
        f.write("\n".join(BAD_LINES) + "\n")
    log = tmp_path / "job.log"
    # Batch 2 is staged, then the job dies before its parse errors are recorded.
    job = JobProcess(
        config,
        log,
        "--available-now",
        env=job_env(WAL_SINK_FAULT="stage.after:2"),
    )
    assert job.wait() == -signal.SIGKILL, job.tail()
    assert quarantined_raw(tmp_path, "folded") == []
    for _ in range(2):  # Spark re-delivers batch 2; a second run finds nothing new
        job = JobProcess(config, log, "--available-now")
        assert job.wait() == 0, job.tail()
    assert totals(db, "folded") == {"a": Decimal("3.00")}
    assert sorted(quarantined_raw(tmp_path, "folded")) == sorted(BAD_LINES)
    entries = Quarantine(str(tmp_path / "wal_quarantine"), "folded").read(100)
    assert {e["entry_id"].rsplit("/", 1)[0] for e in entries} == {
        "parse/sink-batch/2"
    }, "the sink's batch id, a parse error's entry id"
    out = log.read_text()
    assert not (tmp_path / "checkpoint_parse_errors").exists(), "one query only"
    assert "batch 2 staged: rows=- " in out, "re-delivered: the WAL holds it"
    assert "3 unparseable record(s) quarantined" in out


def test_a_stateful_transform_keeps_the_parse_error_query(db, tmp_path):
    fresh_table(db, "counted")
    config = landing_config(
        db,
        tmp_path,
        "counted",
        extra='output_mode = "update"',
    )
    text = config.read_text().replace(
        "[wal]",
        '[transform]\nsql = "SELECT k, SUM(amount) AS amount FROM source '
        'GROUP BY k"\n\n[wal]',
    )
    config.write_text(text.replace('merge = { amount = "add" }', ""))
    with open(tmp_path / "landing" / "f1.json", "a") as f:
        f.write("\n".join(BAD_LINES) + "\n")
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    assert totals(db, "counted") == {"a": Decimal("3.00")}
    assert sorted(quarantined_raw(tmp_path, "counted")) == sorted(BAD_LINES)
    assert (tmp_path / "checkpoint_parse_errors").is_dir()


@pytest.mark.parametrize(
    ("transform", "job", "folds"),
    [
        (None, {}, True),
        ({"sql": "SELECT k, amount * 2 AS amount FROM source WHERE k > ''"}, {}, True),
        (
            {"sql": "SELECT k, explode(array(amount, amount)) AS a FROM source"},
            {},
            True,
        ),
        ({"sql": "SELECT k, count(*) AS n FROM source GROUP BY k"}, {}, False),
        ({"sql": "SELECT DISTINCT k FROM source"}, {}, False),
        ({"sql": "SELECT * FROM source LIMIT 5"}, {}, False),
        ({"sql": "SELECT a.k FROM source a JOIN source b ON a.k = b.k"}, {}, False),
        ({"sql": "SELECT k FROM source UNION ALL SELECT k FROM source"}, {}, False),
        (None, {"output_mode": "update"}, False),
        (
            {
                "sql": "SELECT k, amount FROM source",
                "watermark": {"column": "ts", "delay": "1 minute"},
            },
            {},
            False,
        ),
    ],
)
def test_only_per_row_transforms_fold(spark, tmp_path, transform, job, folds):
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.json").write_text(json.dumps({"k": "a"}) + "\n")
    raw = {
        "sink": {"id": "fold"},
        "source": {
            "format": "json",
            "path": str(tmp_path / "landing"),
            "schema": "k STRING, amount DECIMAL(12,2), ts TIMESTAMP",
        },
        "wal": {"path": str(tmp_path / "wal")},
        "mysql": {"url": "mysql+pymysql://u@127.0.0.1/d", "table": "t", "key": ["k"]},
        "job": {"checkpoint": str(tmp_path / "checkpoint"), **job},
    }
    if transform:
        raw["transform"] = transform
    config = config_from_dict(raw, base_dir=tmp_path)
    frame = streaming_frame(spark, config, read_source(spark, config))
    assert can_fold(config, frame) is folds


def test_a_parse_error_query_that_cannot_start_leaves_no_query_running(
    spark, db, tmp_path, monkeypatch
):
    """The sink's query starts first; when the parse-error query beside it cannot
    start, the sink's query is stopped too: the supervisor stops only the queries
    an attempt returned, and its next attempt would meet this one on the same
    checkpoint."""
    fresh_table(db, "side_fails")
    config = load_config(
        landing_config(db, tmp_path, "side_fails", 'output_mode = "update"')
    )

    def cannot_start(config):
        raise RuntimeError("the parse-error query cannot start")

    monkeypatch.setattr(job_module, "ParseErrorRunner", cannot_start)
    path = ForeachBatchPath(config, StopSignal(), SinkMetrics(config.sink.id))
    queries = JobQueries(spark, config, path, available_now=False)
    try:
        with pytest.raises(RuntimeError, match="cannot start"):
            queries.start()
        assert spark.streams.active == []
    finally:
        for query in spark.streams.active:
            query.stop()
        path.close()
