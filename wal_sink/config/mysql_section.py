"""The [mysql] section of the TOML contract: the target table (or, with
``route_column``, the tables of ``[mysql.tables.NAME]``), how rows merge into it,
the sink's own tables beside it, and how the sink reaches the server and rides out
its outages."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from wal_sink.config.table_section import (
    Conflicts,
    Key,
    Policy,
    ScdType,
    TableConfig,
    Target,
    check_excepted,
    check_history,
    check_policies,
)
from wal_sink.config.values import (
    SECTION,
    DurationText,
    Identifier,
    Location,
    Positive,
    PositiveSeconds,
    Text,
    TlsOptions,
    mysql_url,
)

ACK_TABLES_SUFFIX = "_tables"


@dataclass(frozen=True, config=SECTION)
class MysqlConfig:
    url: str
    """SQLAlchemy URL without a password, e.g. mysql+pymysql://sink@host:3306/db."""
    table: Identifier | None = None
    """Target table (the single-table form); must be InnoDB."""
    key: Key | None = None
    """Columns of the target's PRIMARY KEY or a UNIQUE key (the single-table form)."""
    merge: dict[Identifier, Policy] = Field(default_factory=dict)
    """Per-column merge mode, by name (docs/merge.md, "Per record"); overwrite
    where none is given."""
    version_column: Identifier | None = None
    """Rows update overwrite columns only when their version is >= the stored one."""
    ignore_null_updates: Annotated[bool, Field(strict=True)] = False
    """A NULL in an upsert keeps the stored value of an overwrite column (a partial
    update); a new key takes the NULL."""
    except_columns: tuple[Identifier, ...] = ()
    """Stream columns the table never takes (the single-table form)."""
    stored_as_scd_type: ScdType = 1
    """1: a row per key, as the newest record says; 2: a history, a row per
    version of the key (__START_AT, __END_AT), ordered by version_column."""
    track_history_column_list: tuple[Identifier, ...] | None = None
    """Type 2: the columns whose change opens a new version (default: all)."""
    track_history_except_column_list: tuple[Identifier, ...] = ()
    """Type 2: the columns whose change does not open a new version."""
    history_retention: DurationText | None = None
    """Type 2: how long purge keeps each event before folding it into its key's
    floor; an event older than its key's floor is then set aside (default: every
    event kept)."""
    unique_conflicts: Conflicts = "refuse"
    """Another unique index the stream writes: refuse to start, or set aside records
    that would reach another row through it."""
    tombstone_table: Identifier | None = None
    """With [cdc] and version_column: deleted keys and versions (default: the target
    table's name + "_tombstones")."""
    route_column: Identifier | None = None
    """One stream, several tables: the stream column whose value names each row's
    table (a [mysql.tables.NAME] section's route); instead of table and key."""
    tables: dict[Identifier, TableConfig] = Field(default_factory=dict)
    """With route_column: each target table's settings, by table name."""
    table_order: tuple[Identifier, ...] | None = None
    """With route_column: the tables' order when their foreign keys make a cycle
    (parents first); otherwise the foreign keys decide."""
    auto_create: Annotated[bool, Field(strict=True)] = False
    """Create a missing target table from the stream's columns at start (the key
    as PRIMARY KEY, InnoDB, utf8mb4); with several tables, from its columns."""
    auto_evolve: Annotated[bool, Field(strict=True)] = False
    """Add a column the stream has and the target lacks, NULL-able, at start (never
    drops, narrows or retypes one)."""
    password_env: Text = "WAL_SINK_MYSQL_PASSWORD"
    """Environment variable holding the password."""
    password_file: Location | None = None
    """File holding the password (first line), used when set instead of the env; a
    relative path is taken from the config file's directory."""
    ack_table: Identifier = "wal_sink_ack"
    """One row per applied batch, written in the batch's own transaction."""
    lease_table: Identifier = "wal_sink_lease"
    """One row per sink holding the fencing epoch."""
    outbox_table: Identifier = "wal_sink_outbox"
    """Rows set aside, written in the batch's transaction, until they reach the
    quarantine Delta table."""
    retry_table: Identifier = "wal_sink_retry"
    """Quarantine entries `wal-sink quarantine retry` applied, or tried and saw fail
    again: one row per entry, written in the retry's own transaction."""
    tls: TlsOptions = Field(default_factory=dict)
    """TLS options passed to PyMySQL; a relative path of ``ssl_ca``, ``ssl_cert`` or
    ``ssl_key`` is taken from the config file's directory."""
    local_infile: Annotated[bool, Field(strict=True)] = False
    """Upsert chunks with LOAD DATA LOCAL INFILE + one INSERT … SELECT (MariaDB, needs
    the server's local_infile and CREATE TEMPORARY TABLES on the database); falls
    back to multi-row INSERTs, with one warning, when either is refused."""
    outage_budget: PositiveSeconds = 300.0
    """How long a batch transaction (and the start-up) keeps retrying transient
    errors — MySQL down, failing over, deadlocks — before the query fails."""
    retry_backoff: PositiveSeconds = 0.5
    """Wait before the first retry; doubles each time, with jitter."""
    retry_backoff_max: PositiveSeconds = 10.0
    """Cap of the wait between two retries."""
    max_transaction_rows: Positive = 200_000
    """Consecutive staged batches share one transaction while their rows stay
    under this; a larger batch still gets a transaction of its own."""
    read_timeout: PositiveSeconds = 600.0
    """How long to wait for a server reply before the connection counts as lost."""

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return mysql_url(url)

    @property
    def targets(self) -> tuple[Target, ...]:
        """The target tables: the single-table form's one, or each of ``tables``."""
        if not self.tables:
            return (
                Target(
                    self.table or "",
                    self.key or (),
                    dict(self.merge),
                    self.version_column,
                    self.unique_conflicts,
                    self.tombstone_table,
                    None,
                    None,
                    "mysql",
                    self.ignore_null_updates,
                    self.except_columns,
                    self.stored_as_scd_type,
                    self.track_history_column_list,
                    self.track_history_except_column_list,
                    self.history_retention,
                ),
            )
        return tuple(
            Target(
                name,
                t.key,
                dict(t.merge),
                t.version_column,
                t.unique_conflicts,
                t.tombstone_table,
                t.columns,
                t.route or name,
                f"mysql.tables.{name}",
                t.ignore_null_updates,
                t.except_columns,
                t.stored_as_scd_type,
                t.track_history_column_list,
                t.track_history_except_column_list,
                t.history_retention,
            )
            for name, t in self.tables.items()
        )

    @property
    def target(self) -> Target:
        """The one target of the single-table form."""
        if self.tables:
            raise ValueError("a config with mysql.tables has several targets")
        return self.targets[0]

    @property
    def ack_tables_table(self) -> str:
        """Per-table counts of each applied batch (several tables only)."""
        return f"{self.ack_table}{ACK_TABLES_SUFFIX}"

    @model_validator(mode="after")
    def _form(self) -> MysqlConfig:
        single = {
            k: v
            for k, v in (
                ("table", self.table),
                ("key", self.key),
                ("merge", self.merge),
                ("version_column", self.version_column),
                ("tombstone_table", self.tombstone_table),
                ("ignore_null_updates", self.ignore_null_updates),
                ("except_columns", self.except_columns),
                ("stored_as_scd_type", self.stored_as_scd_type != 1),
                ("track_history_column_list", self.track_history_column_list),
                (
                    "track_history_except_column_list",
                    self.track_history_except_column_list,
                ),
                ("history_retention", self.history_retention),
            )
            if v
        }
        if self.unique_conflicts != "refuse":
            single["unique_conflicts"] = self.unique_conflicts
        if self.tables or self.route_column:
            if single:
                raise ValueError(
                    f"mysql.{next(iter(single))} is a key of the single-table form, "
                    "and mysql.tables / route_column of several tables: give one "
                    "form (each table's settings go in its [mysql.tables.NAME])"
                )
            self._check_tables()
            return self
        if self.table_order:
            raise ValueError("mysql.table_order needs mysql.tables")
        if not self.table or not self.key:
            raise ValueError(
                "give mysql.table and mysql.key, or mysql.route_column and one "
                "[mysql.tables.NAME] section per table"
            )
        check_policies(self.key, self.merge, self.version_column, "mysql.")
        check_excepted(self.except_columns, self.key, self.merge, self.version_column)
        check_history(self, "mysql.")
        return self

    def _check_tables(self) -> None:
        if not self.route_column or not self.tables:
            raise ValueError(
                "several tables need both mysql.route_column and at least one "
                "[mysql.tables.NAME] section"
            )
        routes: dict[str, str] = {}
        for target in self.targets:
            if target.route in routes:
                raise ValueError(
                    f"{target.where}: route {target.route!r} already means table "
                    f"{routes[target.route]}"
                )
            routes[target.route] = target.table
        if self.table_order is not None and sorted(self.table_order) != sorted(
            self.tables
        ):
            raise ValueError(
                "mysql.table_order must name each table of mysql.tables once"
            )
        if len(self.ack_tables_table) > 64:
            raise ValueError(
                f"mysql.ack_table: {self.ack_table!r} leaves no room for the "
                f"per-table counts' table {self.ack_tables_table!r}; shorten it"
            )
