"""Removing acked batches from the WAL and deleting files nothing references, with
delta-rs, safely while the job stages: both are Delta commits (or deletions of
unreferenced files), and a stage commit that meets a concurrent purge is retried
on a fresh snapshot (wal_writer.py).

Vacuum removes files older than the retention that the table no longer references:
batches purged earlier, and what crashes left behind — an attempt's Parquet files
written but never committed, delta-rs's ``NNN.json#N`` and Delta's ``*.tmp`` commit
files in ``_delta_log``. The retention must stay above the longest stage: a younger
file may belong to a batch being written right now (``purge`` refuses one under
``wal.min_vacuum_retention``). Only the sink that owns the WAL purges or vacuums it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from wal_sink.errors import TransientError, WalSinkError
from wal_sink.storage import Storage
from wal_sink.wal.format import BATCH_COLUMN, delta_table
from wal_sink.wal.ownership import WAL, check_owner
from wal_sink.wal.storage_errors import storage_error

DELETE_IDS_PER_COMMIT = 1000
COMMIT_ATTEMPTS = 10


@dataclass(frozen=True)
class VacuumResult:
    files: int
    bytes: int


def delete_batches(
    location: str,
    storage: Storage,
    batch_ids: list[int],
    *,
    sink_id: str | None = None,
) -> None:
    """Remove whole batches from the WAL (callers pass only acked ones: I5), which
    must be ``sink_id``'s when given. Only Delta remove actions are written: the
    predicate is on the partition column."""
    ids = sorted(set(batch_ids))
    try:
        table = _owned(location, storage, sink_id)
        for start in range(0, len(ids), DELETE_IDS_PER_COMMIT):
            chunk = ids[start : start + DELETE_IDS_PER_COMMIT]
            predicate = f"{BATCH_COLUMN} IN ({', '.join(str(int(b)) for b in chunk)})"
            for attempt in range(1, COMMIT_ATTEMPTS + 1):
                try:
                    table.delete(predicate)
                    break
                except CommitFailedError:
                    if attempt == COMMIT_ATTEMPTS:
                        raise TransientError(
                            f"purge of {location} kept conflicting with other commits"
                        ) from None
                    table.update_incremental()
    except WalSinkError:
        raise
    except Exception as e:
        raise storage_error(e, location) from e


def vacuum(
    location: str,
    storage: Storage,
    retain_seconds: float,
    *,
    sink_id: str | None = None,
    dry_run: bool = False,
) -> VacuumResult:
    """Delete (or, with ``dry_run``, count) unreferenced files older than the
    retention, in ``sink_id``'s WAL when given (another sink's is refused). delta-rs
    takes the retention in whole hours: it is rounded up."""
    fs, root = storage.filesystem(location)
    try:
        table = _owned(location, storage, sink_id)
        hours = math.ceil(retain_seconds / 3600)
        listed = table.vacuum(
            retention_hours=hours,
            dry_run=True,
            enforce_retention_duration=False,
            full=True,
        )
        data = [_inside(root, p) for p in listed]
        cutoff = time.time() - hours * 3600
        temps = _stale_log_files(fs, root, cutoff)
        infos = fs.get_file_info([*data, *(t.path for t in temps)])
        size = sum(i.size or 0 for i in infos if i.is_file)
        if not dry_run:
            table.vacuum(
                retention_hours=hours,
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
            )
            for temp in temps:
                fs.delete_file(temp.path)
            emptied = {p.rsplit("/", 1)[0] for p in data}
            emptied |= {p.rsplit("/", 1)[0] for p in emptied}
            _remove_empty_dirs(fs, root, emptied, cutoff)
    except WalSinkError:
        raise
    except Exception as e:
        raise storage_error(e, location) from e
    return VacuumResult(files=len(data) + len(temps), bytes=size)


def _owned(location: str, storage: Storage, sink_id: str | None) -> DeltaTable:
    table = delta_table(location, storage)
    if sink_id is not None:
        check_owner(table, sink_id, location, WAL)
    return table


def _inside(root: str, path: str) -> str:
    """A path vacuum listed (relative to the table, or absolute) inside ``root``."""
    if "://" in path:
        path = path.split("://", 1)[1]
    if path.startswith(root.rstrip("/") + "/") or path.startswith("/"):
        return path
    return f"{root.rstrip('/')}/{path}"


def _stale_log_files(
    fs: pafs.FileSystem, root: str, cutoff: float
) -> list[pafs.FileInfo]:
    """Commit files a crash left in ``_delta_log``: never part of the table."""
    log_dir = f"{root.rstrip('/')}/_delta_log"
    infos = fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
    return [
        i
        for i in infos
        if i.is_file
        and ("#" in i.base_name or i.base_name.endswith(".tmp"))
        and i.mtime is not None
        and i.mtime.timestamp() < cutoff
    ]


def _remove_empty_dirs(
    fs: pafs.FileSystem, root: str, emptied: set[str], cutoff: float
) -> None:
    """Attempt and partition directories left empty: those this vacuum emptied, and
    others once older than the retention (a stage may be creating one right now).
    Object stores have no directories to remove."""
    if not isinstance(fs, pafs.LocalFileSystem):
        return
    for partition in fs.get_file_info(pafs.FileSelector(root)):
        if (
            partition.type != pafs.FileType.Directory
            or not partition.base_name.startswith(f"{BATCH_COLUMN}=")
        ):
            continue
        for attempt in fs.get_file_info(pafs.FileSelector(partition.path)):
            if attempt.type == pafs.FileType.Directory and _removable(
                fs, attempt, emptied, cutoff
            ):
                fs.delete_dir(attempt.path)
        if _removable(fs, fs.get_file_info(partition.path), emptied, cutoff):
            fs.delete_dir(partition.path)


def _removable(
    fs: pafs.FileSystem, info: pafs.FileInfo, emptied: set[str], cutoff: float
) -> bool:
    touched = info.path in emptied or (
        info.mtime is not None and info.mtime.timestamp() < cutoff
    )
    return touched and not fs.get_file_info(
        pafs.FileSelector(info.path, recursive=True)
    )
