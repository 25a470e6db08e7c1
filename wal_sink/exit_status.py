"""Leaving the process with the real exit status.

A process that read Delta/Parquet through pyarrow can abort in native destructors at
interpreter exit ("terminate called without an active exception", exit 134) after
all its work succeeded (apache/arrow#34314, delta-io/delta-rs#2184). The entry
points therefore flush what they wrote and end with ``os._exit``.
"""

from __future__ import annotations

import logging
import os
import sys


def exit_now(code: int) -> None:
    """Flush stdout, stderr and logging, then end the process with ``code``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
