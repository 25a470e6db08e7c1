"""What the WAL holds, as the rest of the sink sees it: staged batches and their
files, and what the WAL's history says of a batch that has no files."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class StagedFile:
    uri: str
    rows: int
    size_bytes: int
    min_seq: int | None
    modified_ms: int | None = None
    """When the file was written (staging time), epoch milliseconds."""


@dataclass(frozen=True)
class StagedBatch:
    batch_id: int
    files: tuple[StagedFile, ...]
    """In apply order: by their first ``_wal_seq``."""

    @classmethod
    def ordered(cls, batch_id: int, files: list[StagedFile]) -> StagedBatch:
        return cls(batch_id, tuple(sorted(files, key=_file_order)))

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def staged_ms(self) -> int | None:
        """When the batch was staged (its newest file), epoch milliseconds."""
        times = [f.modified_ms for f in self.files if f.modified_ms is not None]
        return max(times, default=None)


class BatchState(Enum):
    """What the WAL's history says of a batch that has no files in it now."""

    EMPTY = "staged with no rows"
    MISSING = "staged, but its files were removed since"
    NOT_STAGED = "never staged"


def _file_order(f: StagedFile) -> tuple[int, str]:
    return (f.min_seq if f.min_seq is not None else -1, f.uri)
