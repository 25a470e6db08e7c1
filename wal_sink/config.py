"""The TOML contract (DESIGN.md §4) as frozen dataclasses, validated in one place.

Every problem is reported as one ``ConfigError`` line naming the key, before anything
is written anywhere. The MySQL password is never part of the config: it comes from an
environment variable or a file (see ``mysql_password``).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from wal_sink.durations import parse_duration
from wal_sink.errors import ConfigError
from wal_sink.storage import Storage, is_s3

SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RESERVED_PREFIX = "_wal_"
MERGE_POLICIES = ("overwrite", "add", "keep")
SOURCE_FORMATS = ("json", "csv", "parquet", "kafka", "rate")
RESTART_STRATEGIES = ("fixed-delay", "failure-rate", "none")
OUTPUT_MODES = ("append", "update", "complete")
SPARK_LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
TLS_OPTIONS = (
    "ssl_ca",
    "ssl_cert",
    "ssl_key",
    "ssl_verify_cert",
    "ssl_verify_identity",
)


@dataclass(frozen=True)
class SinkConfig:
    id: str
    """Stable identity: the WAL's Delta app id and the ack rows' sink_id."""


@dataclass(frozen=True)
class SourceConfig:
    format: str
    """Spark source: json | csv | parquet | kafka | rate."""
    path: str | None = None
    """Landing directory for file formats."""
    schema: str | None = None
    """Spark DDL schema of the records (file formats; kafka's JSON value)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Passed unchanged to the Spark reader (maxFilesPerTrigger, subscribe, ...)."""


@dataclass(frozen=True)
class WatermarkConfig:
    column: str
    """Event-time column the watermark follows."""
    delay: str
    """How late data may arrive, as Spark takes it ("10 seconds")."""
    expr: str | None = None
    """SQL expression stored into ``column`` first (e.g. a nested event time)."""


@dataclass(frozen=True)
class TransformConfig:
    sql: str | None = None
    """Spark SQL over the temporary view ``source``."""
    watermark: WatermarkConfig | None = None
    """Optional event-time watermark set on ``source`` before the SQL runs."""


@dataclass(frozen=True)
class WalConfig:
    path: str
    """Delta table of the write-ahead log: a path or an object-store URI."""
    chunk_rows: int = 20_000
    """Rows read back from the WAL and sent to MySQL per statement batch."""
    quarantine_path: str | None = None
    """Delta table of set-aside rows; default: the WAL path + "_quarantine"."""
    max_pending: int = 2
    """Staged batches that may wait for MySQL; beyond that foreachBatch waits."""


@dataclass(frozen=True)
class MysqlConfig:
    url: str
    """SQLAlchemy URL without a password, e.g. mysql+pymysql://sink@host:3306/db."""
    table: str
    """Target table; must be InnoDB."""
    key: tuple[str, ...]
    """Columns of the target's PRIMARY KEY or a UNIQUE key."""
    merge: dict[str, str] = field(default_factory=dict)
    """Per-column policy: overwrite (default) | add | keep."""
    version_column: str | None = None
    """Rows update overwrite columns only when their version is >= the stored one."""
    password_env: str = "WAL_SINK_MYSQL_PASSWORD"
    """Environment variable holding the password."""
    password_file: str | None = None
    """File holding the password (first line), used when set instead of the env."""
    ack_table: str = "wal_sink_ack"
    """One row per applied batch, written in the batch's own transaction."""
    lease_table: str = "wal_sink_lease"
    """One row per sink holding the fencing epoch."""
    tls: dict[str, Any] = field(default_factory=dict)
    """TLS options passed to PyMySQL: ssl_ca, ssl_cert, ssl_key, ssl_verify_cert,
    ssl_verify_identity."""
    local_infile: bool = False
    """Upsert chunks with LOAD DATA LOCAL INFILE + one INSERT … SELECT (MariaDB, needs
    the server's local_infile); falls back to multi-row INSERTs when refused."""
    outbox_table: str = "wal_sink_outbox"
    """Rows set aside, written in the batch's transaction, until they reach the
    quarantine Delta table."""
    outage_budget: float = 300.0
    """Seconds a batch transaction (and the start-up) keeps retrying transient
    errors — MySQL down, failing over, deadlocks — before the query fails."""
    retry_backoff: float = 0.5
    """Seconds before the first retry; doubles each time, with jitter."""
    retry_backoff_max: float = 10.0
    """Cap of the wait between two retries, in seconds."""
    max_transaction_rows: int = 200_000
    """Consecutive staged batches share one transaction while their rows stay
    under this; a larger batch still gets a transaction of its own."""
    read_timeout: float = 600.0
    """Seconds to wait for a server reply before the connection counts as lost."""


@dataclass(frozen=True)
class CdcConfig:
    op_column: str
    """Column holding the operation of each row."""
    order_by: str
    """Rows of one batch are applied in this column's order."""
    delete_values: tuple[str, ...] = ("D",)
    """Values of ``op_column`` that delete the key."""


@dataclass(frozen=True)
class RestartConfig:
    strategy: str = "fixed-delay"
    """fixed-delay | failure-rate | none."""
    attempts: int = 3
    """fixed-delay: restarts before giving up."""
    delay: float = 10.0
    """Seconds to wait before a restart."""
    max_failures: int = 3
    """failure-rate: failures allowed within ``interval``."""
    interval: float = 300.0
    """failure-rate: the window, in seconds."""


@dataclass(frozen=True)
class JobConfig:
    checkpoint: str
    """Spark checkpointLocation of the streaming query."""
    trigger: str = "2 seconds"
    """Processing-time trigger interval."""
    output_mode: str = "append"
    """Spark output mode: append | update | complete."""
    spark_conf: dict[str, str] = field(default_factory=dict)
    """Spark SQL settings set on the session before the query starts."""
    restart: RestartConfig = field(default_factory=RestartConfig)
    """What to do when the query fails."""
    stop_timeout: float = 30.0
    """On SIGTERM, seconds to let the committer apply what is staged; what is left
    stays staged for the next start (a second SIGTERM stops at once)."""
    spark_log_level: str = "WARN"
    """Spark's own log level in the job's output (INFO brings Spark's INFO back)."""


@dataclass(frozen=True)
class Config:
    sink: SinkConfig
    wal: WalConfig
    mysql: MysqlConfig
    source: SourceConfig | None = None
    transform: TransformConfig | None = None
    cdc: CdcConfig | None = None
    job: JobConfig | None = None
    storage: Storage = field(default_factory=Storage)
    """How the job, the CLI and Spark reach S3 WAL and quarantine locations."""
    base_dir: Path = Path(".")
    """Directory relative paths in the file are resolved against (the file's own)."""

    def resolve(self, path: str) -> str:
        """Return ``path`` as given if it is a URI or absolute, else under base_dir."""
        if "://" in path or os.path.isabs(path):
            return path
        return str((self.base_dir / path).resolve())

    @property
    def wal_path(self) -> str:
        return self.resolve(self.wal.path)

    @property
    def quarantine_path(self) -> str:
        return self.resolve(
            self.wal.quarantine_path or self.wal.path.rstrip("/") + "_quarantine"
        )


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML config file.

    Relative paths inside it are resolved against the current directory, the way
    users type them in the README's commands (``-c conf/x.toml`` from the checkout).
    """
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from None
    return config_from_dict(raw, base_dir=Path.cwd())


def config_from_dict(raw: dict[str, Any], base_dir: Path = Path(".")) -> Config:
    """Build a Config from parsed TOML; every error names its key."""
    _only(
        raw,
        "",
        {"sink", "source", "transform", "wal", "mysql", "cdc", "job", "storage"},
    )
    sink = _sink(_table(raw, "sink", required=True))
    mysql = _mysql(_table(raw, "mysql", required=True))
    wal = _wal(_table(raw, "wal", required=True))
    cdc = _cdc(raw["cdc"]) if "cdc" in raw else None
    config = Config(
        sink=sink,
        wal=wal,
        mysql=mysql,
        source=_source(raw["source"]) if "source" in raw else None,
        transform=_transform(raw["transform"]) if "transform" in raw else None,
        cdc=cdc,
        job=_job(raw["job"]) if "job" in raw else None,
        storage=_storage(raw["storage"]) if "storage" in raw else Storage(),
        base_dir=base_dir,
    )
    _cross_checks(config)
    return config


def mysql_password(mysql: MysqlConfig) -> str:
    """Return the password from ``password_file`` or the ``password_env`` variable.

    Raises:
        ConfigError: neither is available; the message says which to set.
    """
    if mysql.password_file:
        try:
            return Path(mysql.password_file).read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError):
            raise ConfigError(
                f"mysql.password_file {mysql.password_file!r} is missing or empty"
            ) from None
    value = os.environ.get(mysql.password_env)
    if value is None:
        raise ConfigError(
            f"the MySQL password is not set: export {mysql.password_env} "
            "(mysql.password_env) or set mysql.password_file"
        )
    return value


# --- sections -------------------------------------------------------------------


def _sink(t: dict[str, Any]) -> SinkConfig:
    _only(t, "sink", {"id"})
    sink_id = _str(t, "sink", "id", required=True)
    if not SINK_ID.match(sink_id):
        raise ConfigError(
            f"sink.id {sink_id!r} must be 1-128 letters, digits, '_', '.' or '-'"
        )
    return SinkConfig(id=sink_id)


def _source(t: Any) -> SourceConfig:
    t = _as_table(t, "source")
    _only(t, "source", {"format", "path", "schema", "options"})
    fmt = _str(t, "source", "format", required=True)
    if fmt not in SOURCE_FORMATS:
        raise ConfigError(
            f"source.format {fmt!r} must be one of {', '.join(SOURCE_FORMATS)}"
        )
    path = _str(t, "source", "path")
    if fmt in ("json", "csv", "parquet") and not path:
        raise ConfigError(f"source.path is required for format {fmt!r}")
    schema = _str(t, "source", "schema")
    if fmt in ("json", "csv", "kafka") and not schema:
        raise ConfigError(f"source.schema is required for format {fmt!r}")
    options = _as_table(t.get("options", {}), "source.options")
    return SourceConfig(format=fmt, path=path, schema=schema, options=dict(options))


def _transform(t: Any) -> TransformConfig:
    t = _as_table(t, "transform")
    _only(t, "transform", {"sql", "watermark"})
    watermark = None
    if "watermark" in t:
        w = _as_table(t["watermark"], "transform.watermark")
        _only(w, "transform.watermark", {"column", "delay", "expr"})
        delay = _str(w, "transform.watermark", "delay", required=True)
        _duration(delay, "transform.watermark.delay")
        watermark = WatermarkConfig(
            column=_ident(w, "transform.watermark", "column", required=True),
            delay=delay,
            expr=_str(w, "transform.watermark", "expr"),
        )
    return TransformConfig(sql=_str(t, "transform", "sql"), watermark=watermark)


def _wal(t: dict[str, Any]) -> WalConfig:
    _only(t, "wal", {"path", "chunk_rows", "quarantine_path", "max_pending"})
    return WalConfig(
        path=_str(t, "wal", "path", required=True),
        chunk_rows=_positive(t, "wal", "chunk_rows", WalConfig.chunk_rows),
        quarantine_path=_str(t, "wal", "quarantine_path"),
        max_pending=_positive(t, "wal", "max_pending", WalConfig.max_pending),
    )


def _mysql(t: dict[str, Any]) -> MysqlConfig:
    keys = {
        "url",
        "table",
        "key",
        "merge",
        "version_column",
        "password_env",
        "password_file",
        "ack_table",
        "lease_table",
        "outbox_table",
        "outage_budget",
        "retry_backoff",
        "retry_backoff_max",
        "max_transaction_rows",
        "read_timeout",
        "tls",
        "local_infile",
    }
    _only(t, "mysql", keys)
    url = _str(t, "mysql", "url", required=True)
    try:
        parsed = make_url(url)
    except Exception:
        raise ConfigError(f"mysql.url {url!r} is not a SQLAlchemy URL") from None
    if parsed.password is not None:
        raise ConfigError(
            "mysql.url must not contain a password; set it in the environment "
            "variable named by mysql.password_env"
        )
    if not parsed.drivername.startswith(("mysql", "mariadb")):
        raise ConfigError(
            f"mysql.url must be a mysql+pymysql:// URL, not {parsed.drivername!r}"
        )
    if not parsed.database:
        raise ConfigError(
            "mysql.url must name a database, e.g. mysql+pymysql://u@host/db"
        )
    key = t.get("key")
    if isinstance(key, str):
        key = [key]
    if not isinstance(key, list) or not key:
        raise ConfigError("mysql.key must be a non-empty list of column names")
    for k in key:
        _check_ident(k, "mysql.key")
    merge = _as_table(t.get("merge", {}), "mysql.merge")
    for col, policy in merge.items():
        _check_ident(col, "mysql.merge")
        if policy not in MERGE_POLICIES:
            raise ConfigError(
                f"mysql.merge.{col} is {policy!r}; use one of "
                f"{', '.join(MERGE_POLICIES)}"
            )
        if col in key:
            raise ConfigError(
                f"mysql.merge.{col}: a key column cannot have a merge policy"
            )
    version_column = _ident(t, "mysql", "version_column")
    if version_column and version_column in merge:
        raise ConfigError(
            f"mysql.merge.{version_column}: the version column cannot have a merge "
            "policy"
        )
    if version_column and version_column in key:
        raise ConfigError("mysql.version_column cannot be a key column")
    password_env = _str(t, "mysql", "password_env") or "WAL_SINK_MYSQL_PASSWORD"
    tls = _as_table(t.get("tls", {}), "mysql.tls")
    for option in tls:
        if option not in TLS_OPTIONS:
            raise ConfigError(
                f"mysql.tls.{option} is not a TLS option; use {', '.join(TLS_OPTIONS)}"
            )
    local_infile = t.get("local_infile", False)
    if not isinstance(local_infile, bool):
        raise ConfigError("mysql.local_infile must be true or false")
    return MysqlConfig(
        url=url,
        table=_ident(t, "mysql", "table", required=True),
        key=tuple(key),
        merge=dict(merge),
        version_column=version_column,
        password_env=password_env,
        password_file=_str(t, "mysql", "password_file"),
        ack_table=_ident(t, "mysql", "ack_table") or "wal_sink_ack",
        lease_table=_ident(t, "mysql", "lease_table") or "wal_sink_lease",
        tls=dict(tls),
        local_infile=local_infile,
        outbox_table=_ident(t, "mysql", "outbox_table") or MysqlConfig.outbox_table,
        outage_budget=_duration(
            t.get("outage_budget", "5 minutes"), "mysql.outage_budget"
        ),
        retry_backoff=_duration(
            t.get("retry_backoff", "0.5 seconds"), "mysql.retry_backoff"
        ),
        retry_backoff_max=_duration(
            t.get("retry_backoff_max", "10 seconds"), "mysql.retry_backoff_max"
        ),
        max_transaction_rows=_positive(
            t, "mysql", "max_transaction_rows", MysqlConfig.max_transaction_rows
        ),
        read_timeout=_duration(
            t.get("read_timeout", "10 minutes"), "mysql.read_timeout"
        ),
    )


def _cdc(t: Any) -> CdcConfig:
    t = _as_table(t, "cdc")
    _only(t, "cdc", {"op_column", "delete_values", "order_by"})
    values = t.get("delete_values", ["D"])
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, str) for v in values)
    ):
        raise ConfigError("cdc.delete_values must be a non-empty list of strings")
    return CdcConfig(
        op_column=_ident(t, "cdc", "op_column", required=True),
        order_by=_ident(t, "cdc", "order_by", required=True),
        delete_values=tuple(values),
    )


def _job(t: Any) -> JobConfig:
    t = _as_table(t, "job")
    _only(
        t,
        "job",
        {
            "checkpoint",
            "trigger",
            "restart",
            "output_mode",
            "spark_conf",
            "stop_timeout",
            "spark_log_level",
        },
    )
    spark_conf = _as_table(t.get("spark_conf", {}), "job.spark_conf")
    for key in spark_conf:
        if not key.startswith("spark."):
            raise ConfigError(
                f"job.spark_conf: {key!r} is not a Spark setting (spark.*)"
            )
    trigger = _str(t, "job", "trigger") or "2 seconds"
    _duration(trigger, "job.trigger")
    output_mode = _str(t, "job", "output_mode") or "append"
    if output_mode not in OUTPUT_MODES:
        raise ConfigError(
            f"job.output_mode {output_mode!r} must be one of {', '.join(OUTPUT_MODES)}"
        )
    return JobConfig(
        checkpoint=_str(t, "job", "checkpoint", required=True),
        trigger=trigger,
        output_mode=output_mode,
        spark_conf={
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in spark_conf.items()
        },
        restart=_restart(t.get("restart", {})),
        stop_timeout=_duration(t.get("stop_timeout", "30 seconds"), "job.stop_timeout"),
        spark_log_level=spark_log_level(
            _str(t, "job", "spark_log_level") or "WARN", "job.spark_log_level"
        ),
    )


def spark_log_level(value: str, where: str) -> str:
    """A log4j level name, upper-cased; ``where`` names the key or flag it came
    from."""
    if value.upper() not in SPARK_LOG_LEVELS:
        raise ConfigError(
            f"{where} {value!r} must be one of {', '.join(SPARK_LOG_LEVELS)}"
        )
    return value.upper()


def _restart(t: Any) -> RestartConfig:
    t = _as_table(t, "job.restart")
    _only(
        t, "job.restart", {"strategy", "attempts", "delay", "max_failures", "interval"}
    )
    strategy = t.get("strategy", "fixed-delay")
    if strategy not in RESTART_STRATEGIES:
        raise ConfigError(
            f"job.restart.strategy {strategy!r} must be one of "
            f"{', '.join(RESTART_STRATEGIES)}"
        )
    for name in ("attempts", "max_failures"):
        value = t.get(name, 3)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"job.restart.{name} must be a non-negative integer")
    return RestartConfig(
        strategy=strategy,
        attempts=t.get("attempts", 3),
        delay=_duration(t.get("delay", "10 seconds"), "job.restart.delay"),
        max_failures=t.get("max_failures", 3),
        interval=_duration(t.get("interval", "5 minutes"), "job.restart.interval"),
    )


def _storage(t: Any) -> Storage:
    t = _as_table(t, "storage")
    for name in t:
        if re.search(r"key|secret|token|password|credential", name, re.IGNORECASE):
            raise ConfigError(
                f"storage.{name}: credentials never go in the config file; export "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use an AWS role"
            )
    _only(t, "storage", {"endpoint", "region", "path_style"})
    endpoint = _str(t, "storage", "endpoint")
    if endpoint is not None and not endpoint.lower().startswith(
        ("http://", "https://")
    ):
        raise ConfigError(
            f"storage.endpoint {endpoint!r} must be an http:// or https:// URL"
        )
    path_style = t.get("path_style", False)
    if not isinstance(path_style, bool):
        raise ConfigError("storage.path_style must be true or false")
    return Storage(
        endpoint=endpoint.rstrip("/") if endpoint else None,
        region=_str(t, "storage", "region"),
        path_style=path_style,
    )


def _cross_checks(config: Config) -> None:
    m = config.mysql
    named = [*m.key, *m.merge, m.version_column or ""]
    if config.cdc:
        named += [config.cdc.op_column, config.cdc.order_by]
    for col in named:
        if col.startswith(RESERVED_PREFIX):
            raise ConfigError(
                f"column {col!r}: names starting with {RESERVED_PREFIX!r} are reserved"
            )
    if config.cdc and config.cdc.op_column in m.key:
        raise ConfigError("cdc.op_column cannot be a key column")
    for key, location in (
        ("wal.path", config.wal_path),
        ("wal.quarantine_path", config.quarantine_path),
    ):
        if is_s3(location) and not config.storage.region:
            raise ConfigError(
                f"{key} is on S3: set storage.region (Spark's S3A needs it on every "
                "executor)"
            )


# --- small validators -----------------------------------------------------------


def _only(t: dict[str, Any], section: str, allowed: set[str]) -> None:
    for k in t:
        if k not in allowed:
            where = f"{section}.{k}" if section else k
            raise ConfigError(
                f"unknown config key {where!r}; allowed here: "
                f"{', '.join(sorted(allowed))}"
            )


def _positive(t: dict[str, Any], section: str, key: str, default: int) -> int:
    value = t.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{section}.{key} must be a positive integer, not {value!r}")
    return value


def _table(raw: dict[str, Any], name: str, required: bool = False) -> dict[str, Any]:
    if name not in raw:
        if required:
            raise ConfigError(f"config section [{name}] is missing")
        return {}
    return _as_table(raw[name], name)


def _as_table(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a table, not {type(value).__name__}")
    return value


def _str(
    t: dict[str, Any], section: str, key: str, required: bool = False
) -> str | None:
    if key not in t:
        if required:
            raise ConfigError(f"{section}.{key} is missing")
        return None
    value = t[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{section}.{key} must be a non-empty string")
    return value


def _ident(
    t: dict[str, Any], section: str, key: str, required: bool = False
) -> str | None:
    value = _str(t, section, key, required)
    if value is not None:
        _check_ident(value, f"{section}.{key}")
    return value


def _check_ident(value: Any, where: str) -> None:
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ConfigError(
            f"{where}: {value!r} is not a valid identifier "
            "(letters, digits and '_', not starting with a digit, at most 64)"
        )


def _duration(value: Any, where: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
