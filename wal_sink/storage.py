"""Where the WAL and the quarantine live, and how each side reaches the same place.

A WAL location is a local path or an object-store URI. delta-rs commits the Delta
log, pyarrow reads and lists files, Spark's executors write Parquet: all three get
their settings from here, so one config place serves them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Storage:
    """How to reach WAL locations; no settings means the local filesystem or what
    each library finds in the environment."""

    delta_options: dict[str, str] = field(default_factory=dict)
    """delta-rs storage options."""

    def filesystem(self, location: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the path inside it for ``location``."""
        if "://" not in location:
            return pafs.LocalFileSystem(), os.path.abspath(location)
        if location.startswith("file://"):
            return pafs.LocalFileSystem(), location[len("file://") :]
        return pafs.FileSystem.from_uri(location)


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended, for paths and URIs alike."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])
