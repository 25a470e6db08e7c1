"""The start-up check that an object store refuses a second conditional put.

delta-rs commits ``_delta_log/N.json`` with ``If-None-Match: *``: of two writers
racing for version N (the job staging while ``wal-sink purge`` runs), the store
refuses the second, which then retries at N+1. A store that ignores the header
lets the second overwrite the first, and a staged batch or a purge vanishes from
the log without an error. So before anything is written, a probe object is put
twice under the location with ``If-None-Match: *``, through the same Rust
``object_store`` client delta-rs uses (obstore): the second put must be refused
(412), or the sink refuses to run. Local paths need no check: delta-rs commits
them with an atomic create of its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from wal_sink.errors import ConfigError
from wal_sink.storage import Storage, is_s3, join
from wal_sink.wal.storage_errors import storage_error

log = logging.getLogger(__name__)

PROBE_DIR = "_wal_sink_probe"
_checked: set[tuple[Storage, str]] = set()


def check_conditional_put(storage: Storage, locations: Iterable[str]) -> None:
    """Refuse, with one ConfigError line, a store that ignores ``If-None-Match``.

    Each object-store bucket is probed once per process; local paths are skipped.

    Raises:
        ConfigError: the store accepted the second conditional put, or does not
            implement conditional puts at all.
        TerminalError, TransientError: the probe could not be written (wrong
            endpoint, missing credentials or permission, store unreachable).
    """
    for location in locations:
        if not is_s3(location):
            continue
        bucket = location.split("://", 1)[1].split("/", 1)[0]
        if (storage, bucket) in _checked:
            continue
        _probe(storage, location)
        _checked.add((storage, bucket))


def _probe(storage: Storage, location: str) -> None:
    import obstore
    from obstore.exceptions import AlreadyExistsError, NotSupportedError

    store, prefix = storage.object_store(location)
    key = "/".join(p for p in (prefix, PROBE_DIR, uuid.uuid4().hex) if p)
    where = join(location, PROBE_DIR)
    written = False
    try:
        obstore.put(store, key, b"first", mode="create")
        written = True
        try:
            obstore.put(store, key, b"second", mode="create")
        except AlreadyExistsError:
            log.info("%s refuses a second conditional put, as commits need", where)
            return
        raise ConfigError(
            f"the object store of {location} ignores conditional puts "
            "(If-None-Match: *): concurrent Delta commits there would overwrite "
            "each other and lose batches; use a store that enforces them"
        )
    except NotSupportedError:
        raise ConfigError(
            f"the object store of {location} does not support conditional puts "
            "(If-None-Match: *), which Delta commits need; use one that does"
        ) from None
    except ConfigError:
        raise
    except Exception as e:
        # obstore has no class for a store answering 501 Not Implemented: its
        # GenericError says so only in its text.
        if " 501 " in str(e) or "NotImplemented" in str(e):
            raise ConfigError(
                f"the object store of {location} does not implement conditional "
                "puts (If-None-Match: *), which Delta commits need; use one that does"
            ) from None
        raise storage_error(e, where) from e
    finally:
        if written:
            try:
                obstore.delete(store, key)
            except Exception as e:  # a leftover probe is harmless
                log.warning("could not delete the probe object %s: %s", key, e)
