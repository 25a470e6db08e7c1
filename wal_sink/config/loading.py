"""Reading a config file: TOML in, a validated ``Config`` out, or one ``ConfigError``
line naming the key, before anything is written anywhere. Also the config's JSON
Schema (``wal-sink config-schema``) and the MySQL password, which is never part of
the config: it comes from an environment variable or a file."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wal_sink.config.mysql_section import MysqlConfig
from wal_sink.config.sections import (
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
)
from wal_sink.errors import ConfigError
from wal_sink.storage import Storage

CONFIG = TypeAdapter(Config)


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a config file, for editors that check and complete TOML."""
    schema = CONFIG.json_schema()
    schema["title"] = "wal_sink config"
    return schema


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML config file.

    Relative paths inside it are resolved against the file's own directory, not the
    current one: the job, the CLI and a scheduler started elsewhere all reach the
    same WAL and checkpoint (one resolved from another directory would be another,
    empty WAL).
    """
    p = Path(path)
    try:
        raw = tomllib.loads(_utf8_text(p))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {e}") from None
    return config_from_dict(raw, base_dir=p.absolute().parent)


def _utf8_text(path: Path) -> str:
    """The file's text; TOML is UTF-8 (a leading byte-order mark is dropped, as
    some editors write one)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {str(path)!r} is not UTF-8 text (byte 0x{data[e.start]:02x} "
            f"on line {line}); save it as UTF-8"
        ) from None


def config_from_dict(raw: dict[str, Any], base_dir: Path = Path(".")) -> Config:
    """Build a Config from parsed TOML; the first error is one line naming its key."""
    try:
        return CONFIG.validate_python(raw, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ConfigError(_one_line(e.errors()[0])) from None


def _one_line(error: dict[str, Any]) -> str:
    """pydantic's first error as the line a user reads: the dotted key, then what
    is wrong with it."""
    loc = [
        part
        for part in error["loc"]
        if not str(part).startswith("function-") and part != "[key]"
    ]
    fields = [p for p in loc if isinstance(p, str)]
    key = ".".join(fields)
    for index in (p for p in loc if isinstance(p, int)):
        key += f"[{index}]"
    message = error["msg"].removeprefix("Value error, ")
    kind = error["type"]
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        allowed = _allowed(fields[:-1])
        return f"unknown config key {key!r}; allowed here: {', '.join(allowed)}"
    if kind == "missing":
        if len(fields) == 1:
            return f"config section [{key}] is missing"
        return f"{key} is missing"
    if kind in ("dataclass_type", "dict_type", "model_type"):
        return f"{key} must be a table, not {type(error['input']).__name__}"
    if not fields or kind == "value_error" and message.startswith(_known(fields)):
        return message
    return f"{key}: {message}"


def _known(fields: list[str]) -> tuple[str, ...]:
    """Messages that already start with a key name (cross-field checks)."""
    return tuple(".".join(fields[: i + 1]) for i in range(len(fields))) + (
        "column ",
        "mysql.",
        "cdc.",
        "wal.",
        "source.",
        "housekeeping.",
    )


def _allowed(path: list[str]) -> list[str]:
    """Keys allowed in the table at ``path``."""
    cls: Any = Config
    for name in path:
        field_type = cls.__dataclass_fields__[name].type
        cls = _section_class(field_type)
    return sorted(cls.__dataclass_fields__)


def _section_class(annotation: Any) -> Any:
    names = {
        c.__name__: c
        for c in (
            SinkConfig,
            SourceConfig,
            WatermarkConfig,
            TransformConfig,
            WalConfig,
            MysqlConfig,
            CdcConfig,
            RestartConfig,
            JobConfig,
            HousekeepingConfig,
            Storage,
        )
    }
    text = annotation if isinstance(annotation, str) else annotation.__name__
    return next(c for n, c in names.items() if n in text)


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
        except UnicodeDecodeError:
            raise ConfigError(
                f"mysql.password_file {mysql.password_file!r} is not UTF-8 text"
            ) from None
    value = os.environ.get(mysql.password_env)
    if value is None:
        raise ConfigError(
            f"the MySQL password is not set: export {mysql.password_env} "
            "(mysql.password_env) or set mysql.password_file"
        )
    return value
