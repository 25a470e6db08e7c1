"""Following the WAL's Delta log as it grows, cheaply: one read of the next
version's commit file per poll, instead of a refresh of the whole table.

Delta writes version N as ``_delta_log/<N, 20 digits>.json``, whole or not at all
(a conditional put on object stores, an atomic create on disks). ``poll`` reads the
versions after the last one it saw until the next is missing: on a local disk a
missing file costs one failed open, on S3 one GET answered 404. A stage commit is a
version carrying this sink's application transaction (the batch id) and the
batch's add actions, with their exact row counts and ``_wal_seq`` ranges: the
batch's files, in apply order, straight from the log. Other versions (purges,
schema or protocol changes, another run taking the WAL) stage nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

from wal_sink import faults
from wal_sink.storage import Storage, join
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.model import StagedBatch, StagedFile
from wal_sink.wal.storage_errors import storage_error

LOG_DIR = "_delta_log"


@dataclass(frozen=True)
class LogVersion:
    version: int
    staged: StagedBatch | None
    """The batch this version staged for the sink, if it is a stage commit."""
    committed_ms: int | None
    """The commit's own timestamp (commitInfo), epoch milliseconds."""


class LogTail:
    """The versions of one WAL after ``version`` (-1: from the first)."""

    def __init__(
        self, location: str, storage: Storage, sink_id: str, version: int
    ) -> None:
        self.location = location
        self.storage = storage
        self.sink_id = sink_id
        self.version = version
        self._fs, root = storage.filesystem(location)
        self._log = f"{root}/{LOG_DIR}"

    def poll(self, limit: int = 1000) -> list[LogVersion]:
        """The versions committed since the last poll, oldest first (at most
        ``limit``); empty when there is none."""
        found: list[LogVersion] = []
        while len(found) < limit:
            text = self._read(self.version + 1)
            if text is None:
                break
            self.version += 1
            found.append(self._parse(self.version, text))
        return found

    def _read(self, version: int) -> str | None:
        path = f"{self._log}/{version:020d}.json"
        try:
            faults.hit("follow.poll", version)
            with self._fs.open_input_stream(path) as f:
                return f.read().decode("utf-8")
        except FileNotFoundError:
            return None
        except Exception as e:
            raise storage_error(
                e, join(self.location, LOG_DIR, f"{version:020d}.json")
            ) from e

    def _parse(self, version: int, text: str) -> LogVersion:
        batch_id = committed_ms = None
        adds: list[dict] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "txn" in action and action["txn"]["appId"] == self.sink_id:
                batch_id = int(action["txn"]["version"])
            elif "add" in action:
                adds.append(action["add"])
            elif "commitInfo" in action:
                committed_ms = action["commitInfo"].get("timestamp")
        if batch_id is None:
            return LogVersion(version, None, committed_ms)
        files = [
            self._file(add)
            for add in adds
            if add.get("partitionValues", {}).get(BATCH_COLUMN) == str(batch_id)
        ]
        return LogVersion(version, StagedBatch.ordered(batch_id, files), committed_ms)

    def _file(self, add: dict) -> StagedFile:
        stats = json.loads(add.get("stats") or "{}")
        path = unquote(add["path"])
        uri = (
            path if "://" in path or path.startswith("/") else join(self.location, path)
        )
        return StagedFile(
            uri=uri,
            rows=int(stats.get("numRecords", 0)),
            size_bytes=int(add["size"]),
            min_seq=stats.get("minValues", {}).get(SEQ_COLUMN),
            modified_ms=add.get("modificationTime"),
        )
