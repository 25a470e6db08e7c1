"""The [mysql] section of the TOML contract: the target table, how rows merge into
it, the sink's own tables beside it, and how the sink reaches the server and rides
out its outages."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from wal_sink.config.values import (
    SECTION,
    Identifier,
    Location,
    Positive,
    PositiveSeconds,
    Text,
    mysql_url,
)

TOMBSTONE_SUFFIX = "_tombstones"


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


@dataclass(frozen=True, config=SECTION)
class MysqlConfig:
    url: str
    """SQLAlchemy URL without a password, e.g. mysql+pymysql://sink@host:3306/db."""
    table: Identifier
    """Target table; must be InnoDB."""
    key: Annotated[
        tuple[Identifier, ...], BeforeValidator(_one_or_many), Field(min_length=1)
    ]
    """Columns of the target's PRIMARY KEY or a UNIQUE key."""
    merge: dict[Identifier, Literal["overwrite", "add", "keep"]] = Field(
        default_factory=dict
    )
    """Per-column policy: overwrite (default) | add | keep."""
    version_column: Identifier | None = None
    """Rows update overwrite columns only when their version is >= the stored one."""
    unique_conflicts: Literal["refuse", "quarantine"] = "refuse"
    """Another unique index the stream writes: refuse to start, or set aside records
    that would reach another row through it."""
    tombstone_table: Identifier | None = None
    """With [cdc] and version_column: deleted keys and versions (default: the target
    table's name + "_tombstones")."""
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
    tls: dict[
        Literal[
            "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity"
        ],
        Any,
    ] = Field(default_factory=dict)
    """TLS options passed to PyMySQL."""
    local_infile: Annotated[bool, Field(strict=True)] = False
    """Upsert chunks with LOAD DATA LOCAL INFILE + one INSERT … SELECT (MariaDB, needs
    the server's local_infile); falls back to multi-row INSERTs when refused."""
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
    def tombstones(self) -> str:
        """The tombstone table's name (used with [cdc] and a version column)."""
        return self.tombstone_table or f"{self.table}{TOMBSTONE_SUFFIX}"

    @model_validator(mode="after")
    def _columns(self) -> MysqlConfig:
        for column in self.merge:
            if column in self.key:
                raise ValueError(
                    f"mysql.merge.{column}: a key column cannot have a merge policy"
                )
        if self.version_column in self.merge:
            raise ValueError(
                f"mysql.merge.{self.version_column}: the version column cannot have "
                "a merge policy"
            )
        if self.version_column in self.key:
            raise ValueError("mysql.version_column cannot be a key column")
        return self
