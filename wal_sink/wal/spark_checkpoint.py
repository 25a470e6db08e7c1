"""Spark's checkpoint read from its files, without a JVM: the staging side and
``wal-sink recover`` need two facts from it and may run where no JVM is.

- ``metadata`` holds the query's id. Spark writes it when a query first starts from
  the checkpoint and every later run keeps it, so it names the checkpoint: a new or
  replaced checkpoint (a pipeline's full refresh, a deleted directory) has another.
- ``commits/N`` is written once the sink returned for batch N.

Local paths and S3 are read with pyarrow under the WAL's storage settings; a scheme
pyarrow cannot reach from here (HDFS without libhdfs, ...) raises OSError or an
ArrowException, which each caller turns into a warning.
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from wal_sink.storage import Storage, join


def last_committed_batch(storage: Storage, checkpoint: str) -> int | None:
    """Highest batch id in the checkpoint's commit log, or None when it has none."""
    fs, root = storage.filesystem(join(checkpoint, "commits"))
    found = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    return max((int(f.base_name) for f in found if f.base_name.isdigit()), default=None)


def query_id(storage: Storage, checkpoint: str) -> str | None:
    """The id in the checkpoint's ``metadata`` file; None when it has none (yet)."""
    fs, path = storage.filesystem(join(checkpoint, "metadata"))
    try:
        with fs.open_input_stream(path) as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    try:
        found = json.loads(text.splitlines()[0]).get("id")
    except (IndexError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and found else None
