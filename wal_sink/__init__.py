"""wal_sink: land a Spark Structured Streaming query in MySQL exactly once.

Each micro-batch is staged to a Delta Lake table (the write-ahead log), then applied
to MySQL in one transaction together with its acknowledgement row.
"""

from wal_sink.config import Config, load_config
from wal_sink.errors import (
    CheckpointResetError,
    ConfigError,
    FencedError,
    TerminalError,
    TransientError,
    WalSinkError,
)

__version__ = "0.5.0"
"""This version; its minor version is that of the sink's MySQL tables (the newest
upgrade script in sql/) and CHANGELOG.md's newest entry."""

__all__ = [
    "CheckpointResetError",
    "Config",
    "ConfigError",
    "FencedError",
    "TerminalError",
    "TransientError",
    "WalSink",
    "WalSinkError",
    "__version__",
    "load_config",
]


def __getattr__(name: str):
    # WalSink needs pyspark; importing it lazily keeps the CLI's read paths fast.
    if name == "WalSink":
        from wal_sink.spark.sink import WalSink

        return WalSink
    raise AttributeError(name)
