"""Records Spark could not parse, into the quarantine: by a query of their own, or
inside the sink's own batches for stateless transforms.

For parsed formats (json, csv, kafka) the records Spark cannot parse go to the
quarantine. A second streaming query over the same source (``ParseErrorRunner``)
does that for any transform, at the price of reading and parsing every record
twice and of a planning round and two checkpoint writes per trigger of its own.
When the transform is stateless — each output row depends on its own batch's
input alone: append mode, no watermark, and a plan of per-row nodes only
(projections, filters, generators) — the sink's query reads the source once and
``ParseFold`` splits each micro-batch instead: the parsed rows go through
``[transform]`` and are staged; the unparseable ones are recorded in the
quarantine.

Exactly once: a batch's parse errors are recorded under the app id
``<sink id>:parse/sink-batch`` with the sink's batch id as version, so a repeated
delivery records nothing twice. They are counted in the staging write's own pass
(an observed metric); the batch is read again only to collect them when there are
any, or when staging wrote nothing (the WAL held the batch already: a re-delivery,
perhaps after a crash between staging and recording). The driver's collect of a
small batch (driver_stage.py) counts in a plan of its own: its ``limit`` stops
reading a larger batch early, whose count is then the executors' write's. Both
happen before
foreachBatch returns, so Spark re-delivers a batch whose errors were not recorded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from wal_sink.config import Config
from wal_sink.spark.source import CORRUPT_COLUMN, parsed_rows, transformed
from wal_sink.wal.quarantine import Entry, Quarantine

log = logging.getLogger("wal_sink.job")

PARSE_STREAM = "parse"
FOLDED_ROLE = "parse/sink-batch"
"""Entry ids ``parse/sink-batch/<batch>/<index>``: still parse errors (``parse/``),
never equal to a parse-error query's ``parse/<batch>/<index>``."""
PER_ROW_NODES = frozenset(
    {
        "Project",
        "Filter",
        "SubqueryAlias",
        "View",
        "Generate",
        "StreamingRelation",
        "StreamingRelationV2",
        "StreamingExecutionRelation",
    }
)
"""Logical plan nodes whose output rows depend on their own input rows alone."""
_NODE = re.compile(r"^[ \t:+\-|!~]*([A-Za-z]\w*)", re.MULTILINE)


class ParseErrorRunner:
    """foreachBatch of the parse-error stream: raw records into the quarantine.

    Only records Spark could not parse reach it, so collecting them is bounded by the
    garbage in the source, not by the batch size.
    """

    def __init__(self, config: Config) -> None:
        self.quarantine = Quarantine(
            config.quarantine_path, config.sink.id, storage=config.storage
        )
        self.app_id = f"{config.sink.id}:{PARSE_STREAM}"  # ':' is not in a sink id
        self.reason = (
            f"could not parse as {config.source.format} with source.schema "
            "(parse-error stream batch {batch})"
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        entries = [
            Entry({"raw": row[0]}, self.reason.format(batch=batch_id))
            for row in df.select(CORRUPT_COLUMN).collect()
        ]
        self.quarantine.record(self.app_id, batch_id, entries)
        if entries:
            log.warning(
                "%d unparseable record(s) quarantined in %s",
                len(entries),
                self.quarantine.path,
            )


def can_fold(config: Config, frame: DataFrame) -> bool:
    """Whether ``frame`` (the streaming frame the sink would get) can be computed
    batch by batch from the raw batch: a parsed format, append mode, no watermark,
    and only per-row nodes in its analyzed plan."""
    if config.job is None or config.job.output_mode != "append":
        return False
    if config.transform is not None and config.transform.watermark is not None:
        return False
    plan = frame._jdf.queryExecution().analyzed().treeString()
    return set(_NODE.findall(plan)) <= PER_ROW_NODES


class ParseFold:
    """Splits raw micro-batches (with ``_wal_corrupt``) for one sink."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.quarantine = Quarantine(
            config.quarantine_path, config.sink.id, storage=config.storage
        )
        self.app_id = f"{config.sink.id}:{FOLDED_ROLE}"  # ':' is not in a sink id
        self.reason = (
            f"could not parse as {config.source.format} with source.schema "
            "(sink batch {batch})"
        )

    def rows(
        self, raw: DataFrame, probe: bool
    ) -> tuple[
        DataFrame | Callable[[], DataFrame],
        DataFrame | None,
        Callable[[int, bool | None], None],
    ]:
        """What to stage from ``raw`` (parsed rows through [transform]): for the
        executors' write (with ``probe``, a function building it, called only when
        a batch goes that way: each plan costs tens of round trips to the JVM) and,
        with ``probe``, for the driver's collect of a small batch, each counting
        the batch's parse errors in its own pass; and the function to call once
        staging is done, with the batch id and which pass read the whole batch
        (True: the driver's collect, False: the executors' write, None: neither,
        as when the WAL held the batch): it records the parse errors."""
        built: dict[str, tuple[DataFrame, Observation]] = {}

        def counted(name: str) -> DataFrame:
            if name not in built:
                observation = Observation(f"wal_sink_parse_errors_{name}")
                count = F.expr(f"count({CORRUPT_COLUMN}) AS n")  # one round trip
                rows = parsed_rows(raw.observe(observation, count))
                frame = transformed(raw.sparkSession, self.config, rows)
                built[name] = frame, observation
            return built[name][0]

        def record(batch_id: int, from_driver: bool | None) -> None:
            if from_driver is not None:
                _, observation = built["collect" if from_driver else "write"]
                if not observation.get["n"]:
                    return
            self._record(raw, batch_id)

        if not probe:  # the write's frame is needed: built now, inside ``fold``
            return counted("write"), None, record
        return lambda: counted("write"), counted("collect"), record

    def _record(self, raw: DataFrame, batch_id: int) -> None:
        # Every column is read, as in the parse-error query: Spark parses only the
        # columns a query needs, and a record that fails in any of them is one
        # the staging pass may have set aside.
        entries = [
            Entry({"raw": row[CORRUPT_COLUMN]}, self.reason.format(batch=batch_id))
            for row in raw.where(F.col(CORRUPT_COLUMN).isNotNull()).collect()
        ]
        self.quarantine.record(self.app_id, batch_id, entries)
        if entries:
            log.warning(
                "%d unparseable record(s) quarantined in %s",
                len(entries),
                self.quarantine.path,
            )
