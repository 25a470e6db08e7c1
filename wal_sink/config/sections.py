"""The sections of the TOML contract (docs/configuration.md) as frozen pydantic
dataclasses: each field's type, default and one-line docstring are written once;
validation, the JSON Schema and the generated configuration reference follow from
them. The field types they are made of are values.py's; the [mysql] section is
mysql_section.py's."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

from wal_sink.config.mysql_section import MysqlConfig
from wal_sink.config.table_section import Target
from wal_sink.config.values import (
    IDENTIFIER,
    SECTION,
    Count,
    DurationText,
    Identifier,
    Location,
    Positive,
    PositiveDurationText,
    PositiveSeconds,
    Seconds,
    Text,
)
from wal_sink.errors import ConfigError
from wal_sink.storage import CREDENTIAL, Storage, is_s3

SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
RESERVED_PREFIX = "_wal_"
# Source options that hold a secret: a password or secret by name, or a JAAS
# configuration with a password in it (Kafka's sasl.jaas.config).
SECRET_OPTION = re.compile(r"(password|secret)$", re.IGNORECASE)
SECRET_VALUE = re.compile(r"password\s*=", re.IGNORECASE)
SPARK_LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")


@dataclass(frozen=True, config=SECTION)
class SinkConfig:
    id: str
    """Stable identity: the WAL's Delta app id and the ack rows' sink_id."""

    @field_validator("id")
    @classmethod
    def _sink_id(cls, value: str) -> str:
        if not SINK_ID.match(value):
            raise ValueError("must be 1-128 letters, digits, '_', '.' or '-'")
        return value


@dataclass(frozen=True, config=SECTION)
class SourceConfig:
    format: Literal["json", "csv", "parquet", "kafka", "rate"]
    """Spark source."""
    path: Location | None = None
    """Landing directory for file formats; a relative path is taken from the config
    file's directory."""
    schema: Text | None = None
    """Spark DDL schema of the records (file formats; kafka's JSON value). Required,
    except for parquet when job.spark_conf sets spark.sql.streaming.schemaInference."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Passed unchanged to the Spark reader (maxFilesPerTrigger, subscribe, ...);
    never a secret: see options_env."""
    options_env: dict[str, Text] = Field(default_factory=dict)
    """Reader options whose value is read from the named environment variable when
    the query starts, for secrets (kafka.sasl.jaas.config, a keystore password)."""

    @field_validator("options")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, text in value.items():
            if SECRET_OPTION.search(str(key)) or SECRET_VALUE.search(str(text)):
                raise ValueError(
                    f"{key!r} holds a secret, which a config file spreads to everyone "
                    "who reads or copies it: put the value in an environment variable "
                    f'and name it in source.options_env ({{ "{key}" = "VARIABLE" }})'
                )
        return value

    @model_validator(mode="after")
    def _needs(self) -> SourceConfig:
        if self.format in ("json", "csv", "parquet") and not self.path:
            raise ValueError(f"source.path is required for format {self.format!r}")
        if self.format in ("json", "csv", "kafka") and not self.schema:
            raise ValueError(f"source.schema is required for format {self.format!r}")
        both = sorted(set(self.options) & set(self.options_env))
        if both:
            raise ValueError(f"{both[0]!r} is in both options and options_env")
        return self

    def reader_options(self) -> dict[str, Any]:
        """``options`` with each ``options_env`` key's value read from its variable.

        Raises:
            ConfigError: naming the variable (never a value) when it is unset.
        """
        missing = [v for v in self.options_env.values() if v not in os.environ]
        if missing:
            raise ConfigError(
                f"source.options_env names the environment variable {missing[0]!r}, "
                "which is not set"
            )
        secrets = {key: os.environ[v] for key, v in self.options_env.items()}
        return {**self.options, **secrets}


@dataclass(frozen=True, config=SECTION)
class WatermarkConfig:
    column: Identifier
    """Event-time column the watermark follows."""
    delay: DurationText
    """How late data may arrive, as Spark takes it ("10 seconds")."""
    expr: Text | None = None
    """SQL expression stored into ``column`` first (e.g. a nested event time)."""


@dataclass(frozen=True, config=SECTION)
class TransformConfig:
    sql: Text | None = None
    """Spark SQL over the temporary view ``source``."""
    watermark: WatermarkConfig | None = None
    """Optional event-time watermark set on ``source`` before the SQL runs."""


@dataclass(frozen=True, config=SECTION)
class WalConfig:
    path: Location
    """Delta table of the write-ahead log: a path or an object-store URI; a relative
    path is taken from the config file's directory."""
    chunk_rows: Positive = 20_000
    """Rows read back from the WAL and sent to MySQL per statement batch."""
    quarantine_path: Location | None = None
    """Delta table of set-aside rows; default: the WAL path + "_quarantine" (a
    relative path is taken from the config file's directory)."""
    max_pending: Positive = 2
    """Staged batches that may wait for MySQL; beyond that foreachBatch waits."""
    driver_stage_rows: Annotated[int, Field(ge=0, strict=True)] = 10_000
    """foreachBatch stages a batch of at most this many rows from the driver (one
    Arrow collect, one Parquet file written by pyarrow) instead of a Spark write
    job; 0 stages every batch from the executors. Bounds the rows held on the
    driver."""
    min_vacuum_retention: Seconds = 3600.0
    """Floor of `purge --vacuum --retain`: a stage in progress has files younger than
    itself, so keep this above the slowest stage (default one hour)."""


@dataclass(frozen=True, config=SECTION)
class CdcConfig:
    op_column: Identifier
    """Column holding the operation of each row."""
    order_by: Identifier
    """Rows of one batch are applied in this column's order."""
    delete_values: Annotated[tuple[Text, ...], Field(min_length=1)] = ("D",)
    """Values of ``op_column`` that delete the key."""
    tombstone_retention: DurationText = "7 days"
    """With mysql.version_column: how long a delete keeps older upserts of its key
    out (``wal-sink purge`` removes older tombstones)."""
    truncate_values: tuple[Text, ...] = ()
    """Values of ``op_column`` that truncate the record's table: every row whose
    version is at or below the record's goes, and older upserts stay out (every
    table needs ``mysql.version_column``)."""

    @property
    def removing(self) -> tuple[str, ...]:
        """Ops that write no values: deletes and truncates."""
        return (*self.delete_values, *self.truncate_values)


@dataclass(frozen=True, config=SECTION)
class RestartConfig:
    strategy: Literal["fixed-delay", "failure-rate", "none"] = "fixed-delay"
    """What to do when the query fails."""
    attempts: Count = 3
    """fixed-delay: restarts before giving up."""
    delay: Seconds = 10.0
    """Wait before a restart."""
    max_failures: Count = 3
    """failure-rate: failures allowed within ``interval``."""
    interval: PositiveSeconds = 300.0
    """failure-rate: the window."""


# Settings whose name matches CREDENTIAL but whose value is a class or a path, never
# a secret: which provider chain finds the credentials.
NOT_SECRET = ("credentials.provider", "credential.provider.path")


def _spark_settings(value: Any) -> Any:
    if isinstance(value, dict):
        for key in value:
            if not str(key).startswith("spark."):
                raise ValueError(f"{key!r} is not a Spark setting (spark.*)")
            if CREDENTIAL.search(str(key)) and not str(key).endswith(NOT_SECRET):
                raise ValueError(
                    f"{key!r} may hold a secret, which Spark would show in its UI "
                    "and event log; credentials come from the environment (e.g. "
                    "AWS_SECRET_ACCESS_KEY) or a role, never from the config file"
                )
        return {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in value.items()
        }
    return value


@dataclass(frozen=True, config=SECTION)
class JobConfig:
    checkpoint: Location
    """Spark checkpointLocation of the streaming query; a relative path is taken
    from the config file's directory."""
    trigger: PositiveDurationText = "2 seconds"
    """Processing-time trigger interval."""
    output_mode: Literal["append", "update", "complete"] = "append"
    """Spark output mode."""
    spark_conf: Annotated[dict[str, str], BeforeValidator(_spark_settings)] = Field(
        default_factory=dict
    )
    """Spark settings for the job's session: given to it as it starts (so static
    settings such as ``spark.hadoop.*`` work under spark-submit) and set again on
    a session the job is handed. A key set here wins over the job's own default
    (a local checkpoint written without Hadoop's checksum files)."""
    restart: RestartConfig = Field(default_factory=RestartConfig)
    """What to do when the query fails."""
    stop_timeout: Seconds = 30.0
    """On SIGTERM, how long to let the committer apply what is staged; what is left
    stays staged for the next start (a second SIGTERM stops at once)."""
    metrics_port: Annotated[int, Field(gt=0, lt=65536, strict=True)] | None = None
    """Serve Prometheus metrics on this TCP port (off when unset)."""
    metrics_host: Text = "0.0.0.0"
    """Address the metrics server listens on."""
    spark_log_level: Annotated[str, AfterValidator(lambda v: spark_log_level(v))] = (
        "WARN"
    )
    """Spark's own log level in the job's output (INFO brings Spark's INFO back)."""
    writer: Literal["foreach_batch", "datasource"] = "foreach_batch"
    """How the job's query stages: foreach_batch (a committer thread in the driver)
    or datasource (format("wal_sink"), with a follower process applying)."""


@dataclass(frozen=True, config=SECTION)
class HousekeepingConfig:
    interval: PositiveSeconds = 3600.0
    """Time between two scheduled purges by the process that commits (the job or
    the follower); the first runs one interval after the start."""
    acked_batches_older_than: Seconds | None = None
    """WAL batches acked longer ago than this go, with their ack rows but the
    newest; unset: batches are kept. Unacked batches always stay."""
    quarantine_older_than: Seconds | None = None
    """Quarantine entries set aside longer ago than this go, open ones included;
    unset: only the retried entries of purged batches."""
    vacuum: bool = False
    """Also delete the WAL's unreferenced files older than ``vacuum_retain``."""
    vacuum_retain: Seconds = 3600.0
    """Vacuum keeps unreferenced files younger than this (whole hours, rounded
    up); at least wal.min_vacuum_retention."""


@dataclass(frozen=True, config=SECTION)
class Config:
    sink: SinkConfig
    """Who the sink is."""
    mysql: MysqlConfig
    """The target, and the sink's own tables beside it."""
    wal: WalConfig
    """The write-ahead log (a Delta table)."""
    source: SourceConfig | None = None
    """What the job reads (the job only)."""
    transform: TransformConfig | None = None
    """SQL between source and sink (the job only)."""
    cdc: CdcConfig | None = None
    """Rows carry an operation; deletes delete by key."""
    job: JobConfig | None = None
    """The streaming job's settings."""
    storage: Storage = Field(default_factory=Storage)
    """How the job, the CLI and Spark reach S3 WAL and quarantine locations."""
    housekeeping: HousekeepingConfig | None = None
    """Purges the job and the follower run on a schedule; unset: none (only
    ``wal-sink purge`` by hand)."""

    @property
    def wal_path(self) -> str:
        return self.wal.path

    def keeps_tombstones(self, target: Target) -> bool:
        """Whether ``target``'s deletes leave tombstones: with [cdc] and a version
        column, in a table of one row per key (a history keeps its events)."""
        return bool(self.cdc and target.version_column and target.scd_type == 1)

    @property
    def quarantine_path(self) -> str:
        return self.wal.quarantine_path or self.wal.path.rstrip("/") + "_quarantine"

    @model_validator(mode="after")
    def _across(self) -> Config:
        m = self.mysql
        named = [m.route_column or ""]
        for t in m.targets:
            named += [*t.key, *t.merge, t.version_column or "", *(t.columns or ())]
        if self.cdc:
            named += [self.cdc.op_column, self.cdc.order_by]
        for column in named:
            if column.startswith(RESERVED_PREFIX):
                raise ValueError(
                    f"column {column!r}: names starting with {RESERVED_PREFIX!r} are "
                    "reserved"
                )
        for t in m.targets:
            if self.cdc and self.cdc.op_column in t.key:
                raise ValueError(f"cdc.op_column cannot be a key column ({t.where})")
            if m.route_column in t.key:
                raise ValueError(
                    f"mysql.route_column cannot be a key column ({t.where})"
                )
            if self.cdc and t.version_column and not IDENTIFIER.match(t.tombstones):
                raise ValueError(
                    f"{t.where}.tombstone_table: {t.tombstones!r} is longer than 64 "
                    "characters; name the tombstone table"
                )
        if self.cdc and self.cdc.truncate_values:
            both = set(self.cdc.truncate_values) & set(self.cdc.delete_values)
            if both:
                raise ValueError(
                    f"cdc.truncate_values and cdc.delete_values share {sorted(both)}"
                )
            for t in m.targets:
                if t.scd_type == 2:
                    raise ValueError(
                        f"cdc.truncate_values with {t.where}.stored_as_scd_type = 2: "
                        "a truncate of a history is not defined"
                    )
                if not t.version_column:
                    raise ValueError(
                        f"cdc.truncate_values needs {t.where}.version_column: a "
                        "truncate removes the rows at or below its version"
                    )
                if not IDENTIFIER.match(t.truncates):
                    raise ValueError(
                        f"{t.where}.tombstone_table: {t.tombstones!r} leaves no room "
                        f"for the truncate table {t.truncates!r}; shorten it"
                    )
        kept = self.housekeeping
        if kept and kept.vacuum and kept.vacuum_retain < self.wal.min_vacuum_retention:
            raise ValueError(
                f"housekeeping.vacuum_retain is under wal.min_vacuum_retention "
                f"({self.wal.min_vacuum_retention:g} s): a stage still writing has "
                "files younger than itself, which vacuum would delete"
            )
        if self.cdc and m.route_column == self.cdc.op_column:
            raise ValueError("mysql.route_column cannot be cdc.op_column")
        for key, location in (
            ("wal.path", self.wal_path),
            ("wal.quarantine_path", self.quarantine_path),
        ):
            if is_s3(location) and not self.storage.region:
                raise ValueError(
                    f"{key} is on S3: set storage.region (Spark's S3A needs it on "
                    "every executor)"
                )
        return self


def spark_log_level(value: str) -> str:
    """A log4j level name, upper-cased."""
    if value.upper() not in SPARK_LOG_LEVELS:
        raise ValueError(f"{value!r} must be one of {', '.join(SPARK_LOG_LEVELS)}")
    return value.upper()
