"""Config values checked beyond their type, which the sections are made of: plain
SQL names, locations (relative paths are resolved here, once, against the base
directory the loader passes in; the files of the TLS options too), counts,
durations (a number of seconds or text, bounded) and the MySQL URL (the driver, no
password, PyMySQL's own options)."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pymysql
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
)
from sqlalchemy.engine import make_url

from wal_sink.durations import parse_duration

SECTION = ConfigDict(extra="forbid", use_attribute_docstrings=True)
"""Every section's pydantic config: unknown keys are refused."""
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_SECONDS = 365 * 86400.0


def _identifier(value: str) -> str:
    if not IDENTIFIER.match(value):
        raise ValueError(
            f"{value!r} is not a plain SQL name (letters, digits and '_', at most 64, "
            "not starting with a digit)"
        )
    return value


def _location(value: str, info: ValidationInfo) -> str:
    """A URI or an absolute path as given; a relative path under the base directory,
    the config file's (the one place relative paths are resolved)."""
    if "://" in value or os.path.isabs(value):
        return value
    base = (info.context or {}).get("base_dir", Path.cwd())
    return str((Path(base) / value).resolve())


TLS_FILES = frozenset({"ssl_ca", "ssl_cert", "ssl_key"})
"""The TLS options that name a file."""


def _tls_files(options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """PyMySQL's TLS options, the files among them resolved as every location."""
    return {
        name: _location(value, info)
        if name in TLS_FILES and isinstance(value, str) and value
        else value
        for name, value in options.items()
    }


Identifier = Annotated[str, AfterValidator(_identifier)]
Location = Annotated[str, Field(min_length=1), AfterValidator(_location)]
TlsOptions = Annotated[
    dict[
        Literal[
            "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity"
        ],
        Any,
    ],
    AfterValidator(_tls_files),
]
Text = Annotated[str, Field(min_length=1)]
Positive = Annotated[int, Field(gt=0, strict=True)]
Count = Annotated[int, Field(ge=0, strict=True)]


def _seconds(value: Any) -> float:
    """A duration in seconds: a number, or text such as '10 seconds'; at most a
    year (longer overflows the timers that wait for it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("a duration is a number of seconds or text like '10 seconds'")
    seconds = parse_duration(value) if isinstance(value, str) else float(value)
    if not 0 <= seconds <= MAX_SECONDS:  # also false for NaN
        raise ValueError(
            f"{value!r} is not a duration from 0 to 365 days; write e.g. '10 seconds'"
        )
    return seconds


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be more than 0 seconds")
    return seconds


def _duration_text(value: str) -> str:
    _seconds(value)
    return value


def _positive_text(value: str) -> str:
    _positive(_seconds(value))
    return value


DURATION_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "string"}],
    "description": "seconds, or text such as '10 seconds', '500ms', '2 minutes'",
}
Seconds = Annotated[float, BeforeValidator(_seconds), WithJsonSchema(DURATION_SCHEMA)]
PositiveSeconds = Annotated[Seconds, AfterValidator(_positive)]
DurationText = Annotated[str, AfterValidator(_duration_text)]
PositiveDurationText = Annotated[str, AfterValidator(_positive_text)]


DRIVERS = ("mysql+pymysql", "mariadb+pymysql")
# The URL's query keys are PyMySQL's connection arguments (SQLAlchemy also takes
# these ssl_* ones); the client's capabilities are the sink's own settings.
URL_QUERY_KEYS = frozenset(
    inspect.signature(pymysql.connections.Connection).parameters
) | {"ssl_capath", "ssl_cipher", "ssl_check_hostname"}
URL_QUERY_OWN = {
    "local_infile": "set mysql.local_infile instead",
    "client_flag": "the sink sets the client's capabilities itself",
}


def mysql_url(url: str) -> str:
    """The URL as given, or a ValueError saying what is wrong with it; messages
    never echo the URL, as a careless one may hold a password."""
    try:
        parsed = make_url(url)
    except Exception:
        raise ValueError(
            "is not a URL of the form mysql+pymysql://user@host:3306/database"
        ) from None
    if parsed.password is not None:
        raise ValueError(
            "must not contain a password; set it in the environment variable "
            "named by mysql.password_env"
        )
    for key in parsed.query:
        _url_query_key(key)
    if parsed.drivername not in DRIVERS:
        raise ValueError(
            f"must start with mysql+pymysql:// or mariadb+pymysql:// (the sink "
            f"talks to the server through PyMySQL), not {parsed.drivername}://"
        )
    try:  # as SQLAlchemy will, converting query values to PyMySQL's types
        parsed.get_dialect()().create_connect_args(parsed)
    except ValueError as e:
        raise ValueError(f"a query value is not of its option's type: {e}") from None
    if not parsed.database:
        raise ValueError("must name a database, e.g. mysql+pymysql://u@host/db")
    return url


def _url_query_key(key: str) -> None:
    """Refuse a URL query key PyMySQL would take over the sink's settings: a
    password (it would override the environment's), the client's capabilities
    (local infile is mysql.local_infile's alone), or one it does not know (a
    traceback at the first connection otherwise)."""
    if "pass" in key.lower():
        raise ValueError(
            f"query key {key!r}: a password never goes in the URL; set it in the "
            "environment variable named by mysql.password_env, or in "
            "mysql.password_file"
        )
    if key in URL_QUERY_OWN:
        raise ValueError(f"query key {key!r} is refused: {URL_QUERY_OWN[key]}")
    if key not in URL_QUERY_KEYS:
        raise ValueError(f"query key {key!r} is not a PyMySQL connection option")
