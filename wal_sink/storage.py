"""Where the WAL and the quarantine live, and how each side reaches the same place.

A WAL location is a local path or an object-store URI. delta-rs commits the Delta
log, pyarrow lists and reads files, Spark's executors write Parquet through Hadoop's
S3A filesystem: all three take their S3 settings (endpoint, region, addressing,
TLS) from one ``Storage``, built from the config's ``[storage]`` section.

Credentials are never part of it: each library finds them in the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``) or its own
standard AWS provider chain (web identity, container and instance roles).
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

if TYPE_CHECKING:
    from obstore.store import S3Store
    from pyspark.sql import SparkSession

S3_SCHEMES = ("s3", "s3a")


CREDENTIAL = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


@dataclass(
    frozen=True,
    config=ConfigDict(extra="forbid", use_attribute_docstrings=True),
)
class Storage:
    """How to reach S3 locations (the config's ``[storage]``); without settings,
    each library's defaults (AWS, and whatever the environment says)."""

    endpoint: str | None = None
    """S3 endpoint URL, e.g. ``https://minio.internal:9000``; ``http://`` turns TLS
    off. None: AWS S3 in ``region``."""
    region: str | None = Field(default=None, min_length=1)
    """Region to sign requests for (Spark's S3A needs one even for other stores)."""
    path_style: bool = False
    """Address buckets as ``endpoint/bucket/key`` instead of ``bucket.endpoint/key``
    (most S3-compatible servers want this)."""

    @model_validator(mode="before")
    @classmethod
    def _no_credentials(cls, values: Any) -> Any:
        for name in values if isinstance(values, dict) else ():
            if CREDENTIAL.search(str(name)):
                raise ValueError(
                    f"storage.{name}: credentials never go in the config file; "
                    "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or use an "
                    "AWS role"
                )
        return values

    @field_validator("path_style", mode="before")
    @classmethod
    def _boolean(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.lower().startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @property
    def configured(self) -> bool:
        return self != Storage()

    @property
    def tls(self) -> bool:
        return not (self.endpoint or "").lower().startswith("http://")

    @property
    def delta_options(self) -> dict[str, str]:
        """delta-rs storage options (it finds credentials itself)."""
        options: dict[str, str] = {}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
        if self.region:
            options["AWS_REGION"] = self.region
        if not self.tls:
            options["AWS_ALLOW_HTTP"] = "true"
        return options

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop S3A settings (``fs.s3a.*``); empty without a ``[storage]``
        section, so settings given to spark-submit stand."""
        if not self.configured:
            return {}
        conf = {"fs.s3a.path.style.access": str(self.path_style).lower()}
        if self.endpoint:
            conf["fs.s3a.endpoint"] = self.endpoint
            conf["fs.s3a.connection.ssl.enabled"] = str(self.tls).lower()
        if self.region:
            conf["fs.s3a.endpoint.region"] = self.region
        return conf

    def spark_conf(self) -> dict[str, str]:
        """The same as Spark settings, for ``spark-submit --conf`` or a builder."""
        return {f"spark.hadoop.{k}": v for k, v in self.hadoop_conf().items()}

    def configure_spark(self, spark: SparkSession) -> None:
        """Set the S3A settings on the session's Hadoop configuration, from which
        every later write (and its executors) and checkpoint access takes them.
        S3A reads them when it creates a filesystem: call this before the first
        access to an ``s3a://`` path."""
        conf = self.hadoop_conf()
        if not conf:
            return
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in conf.items():
            hadoop.set(key, value)

    def filesystem(self, location: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the path inside it for ``location``."""
        if location.startswith("file:"):
            # file:///p, and file:/p as Hadoop qualifies a local path
            return pafs.LocalFileSystem(), urlsplit(location).path
        if "://" not in location:
            return pafs.LocalFileSystem(), os.path.abspath(location)
        if is_s3(location):
            return _s3_filesystem(self), location.split("://", 1)[1].rstrip("/")
        return pafs.FileSystem.from_uri(location)

    def object_store(self, location: str) -> tuple[S3Store, str]:
        """An obstore S3 store for ``location``'s bucket and the key prefix inside
        it: the Rust ``object_store`` client delta-rs commits with, given the same
        options (and so the same addressing and credential sources)."""
        from obstore.store import S3Store

        parts = urlsplit(location)
        options: dict[str, object] = {}
        if self.endpoint:
            options["endpoint"] = self.endpoint
        if self.region:
            options["region"] = self.region
        store = S3Store(
            parts.netloc, client_options={"allow_http": not self.tls}, **options
        )
        return store, parts.path.strip("/")


def is_s3(location: str) -> bool:
    """``s3://`` or ``s3a://``."""
    return "://" in location and location.split("://", 1)[0].lower() in S3_SCHEMES


def spark_uri(location: str) -> str:
    """``location`` as Spark's Hadoop filesystems name it: ``s3://`` is S3A's
    ``s3a://`` (delta-rs and pyarrow take both)."""
    if location.lower().startswith("s3://"):
        return "s3a://" + location[len("s3://") :]
    return location


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended, for paths and URIs alike."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


@functools.lru_cache(maxsize=8)
def _s3_filesystem(storage: Storage) -> pafs.S3FileSystem:
    """One pyarrow S3 filesystem per setting: creating one resolves credentials,
    which may mean asking an instance metadata service."""
    kwargs: dict[str, object] = {}
    if storage.endpoint:
        parts = urlsplit(storage.endpoint)
        kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        kwargs["scheme"] = parts.scheme or "https"
        kwargs["force_virtual_addressing"] = not storage.path_style
    if storage.region:
        kwargs["region"] = storage.region
    return pafs.S3FileSystem(**kwargs)
