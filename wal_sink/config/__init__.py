"""The TOML contract: its sections (sections.py, mysql_section.py), the values they
are made of (values.py), and reading a file (loading.py)."""

from wal_sink.config.loading import (
    config_from_dict,
    config_schema,
    load_config,
    mysql_password,
)
from wal_sink.config.mysql_section import MysqlConfig
from wal_sink.config.sections import (
    RESERVED_PREFIX,
    SPARK_LOG_LEVELS,
    CdcConfig,
    Config,
    HousekeepingConfig,
    JobConfig,
    RestartConfig,
    SinkConfig,
    SourceConfig,
    TransformConfig,
    WalConfig,
    WatermarkConfig,
    spark_log_level,
)
from wal_sink.config.table_section import TableConfig, Target

__all__ = [
    "RESERVED_PREFIX",
    "SPARK_LOG_LEVELS",
    "CdcConfig",
    "Config",
    "HousekeepingConfig",
    "JobConfig",
    "MysqlConfig",
    "RestartConfig",
    "SinkConfig",
    "SourceConfig",
    "TableConfig",
    "Target",
    "TransformConfig",
    "WalConfig",
    "WatermarkConfig",
    "config_from_dict",
    "config_schema",
    "load_config",
    "mysql_password",
    "spark_log_level",
]
