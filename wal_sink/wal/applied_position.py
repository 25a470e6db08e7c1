"""The follower's applied position, published beside the WAL's data: how the data
source learns, without MySQL, how far MySQL has got (backpressure).

``wal-sink follow`` writes the newest batch id it knows applied (the newest ack)
into ``<wal>/_wal_sink/applied.json`` after its start-up recovery and after the
batches it applies; the data source's ``commit`` reads it to count the staged
batches still waiting for MySQL. It is a hint that may lag, never run ahead: it is
written after the ack rows COMMIT, so a reader at worst waits a little longer.
Delta readers and vacuum leave ``_``-prefixed paths alone.
"""

from __future__ import annotations

import json
import time
import uuid

import pyarrow.fs as pafs

from wal_sink.storage import Storage, join
from wal_sink.wal.storage_errors import storage_error

POSITION_FILE = "_wal_sink/applied.json"


class AppliedPosition:
    def __init__(self, location: str, storage: Storage = Storage()) -> None:
        self.location = location
        self.storage = storage

    @property
    def uri(self) -> str:
        return join(self.location, POSITION_FILE)

    def read(self) -> int | None:
        """The newest applied batch id published, or None when none was."""
        fs, root = self.storage.filesystem(self.location)
        try:
            with fs.open_input_stream(f"{root}/{POSITION_FILE}") as f:
                published = json.loads(f.read())
        except FileNotFoundError:
            return None
        except Exception as e:
            raise storage_error(e, self.uri) from e
        return published.get("batch_id")

    def publish(self, batch_id: int, epoch: int | None) -> None:
        """Say that every batch up to ``batch_id`` is applied (by lease ``epoch``).

        One PUT on an object store; on a local disk a new file renamed over the old,
        so a reader never sees half of it."""
        fs, root = self.storage.filesystem(self.location)
        path = f"{root}/{POSITION_FILE}"
        body = json.dumps(
            {
                "batch_id": batch_id,
                "epoch": epoch,
                "published_ms": int(time.time() * 1e3),
            }
        ).encode()
        try:
            if isinstance(fs, pafs.LocalFileSystem):
                fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                temp = f"{path}.{uuid.uuid4().hex}.tmp"
                with fs.open_output_stream(temp) as out:
                    out.write(body)
                fs.move(temp, path)
            else:
                with fs.open_output_stream(path) as out:
                    out.write(body)
        except Exception as e:
            raise storage_error(e, self.uri) from e
