"""``wal-sink status --watch``: a sink's progress, read again every few seconds.

Each reading is ``collect_status`` (delta-rs and SQL, no JVM); rows/s comes from
two successive readings of the rows applied. On a terminal the figures refresh in
place (rich Live); otherwise — or with ``--json`` — each reading is one line (text,
or a JSON object), so the output can go to a file or a pipe. Ctrl-C (SIGINT) ends
the watch with exit 0. A reading that fails after the first one (MySQL restarting,
say) is shown and the next one tried; a failing first reading fails the command.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlalchemy.exc import DBAPIError

from wal_sink.errors import WalSinkError
from wal_sink.ops.status import SinkStatus, collect_status
from wal_sink.protocol.sink_instance import SinkInstance


@dataclass(frozen=True)
class Reading:
    """One status reading and what it says compared with the one before."""

    status: SinkStatus
    at: float
    """time.monotonic() of the reading."""
    taken: str
    """Wall-clock time of the reading, HH:MM:SS."""
    rows_per_second: float | None
    """Rows applied per second since the previous reading (None for the first, or
    when the count went down: purge drops the acks of purged batches)."""

    def to_json(self) -> dict[str, object]:
        st = self.status
        return {
            "taken": self.taken,
            "sink_id": st.sink_id,
            "pending_batches": st.pending_batches,
            "commit_lag_seconds": st.commit_lag_seconds,
            "last_commit_at": st.last_commit_at,
            "seconds_since_last_commit": st.lag_seconds,
            "acked_last": st.acked_last,
            "rows_applied": st.rows_applied,
            "rows_per_second": None
            if self.rows_per_second is None
            else round(self.rows_per_second, 1),
        }


def next_reading(status: SinkStatus, at: float, before: Reading | None) -> Reading:
    rate = None
    if before is not None and at > before.at:
        grown = status.rows_applied - before.status.rows_applied
        rate = grown / (at - before.at) if grown >= 0 else None
    return Reading(status, at, datetime.now().strftime("%H:%M:%S"), rate)


def watch(
    sink: SinkInstance,
    interval: float,
    console: Console,
    as_json: bool = False,
) -> None:
    """Read and show the sink's status every ``interval`` seconds until Ctrl-C."""
    live = console.is_terminal and not as_json
    try:
        last = next_reading(collect_status(sink), time.monotonic(), None)
        due = last.at
        if live:
            display: Live | nullcontext = Live(
                _panel(last, interval), console=console, auto_refresh=False
            )
        else:
            display = nullcontext()
            _print_line(console, last, as_json)
        with display:
            while True:
                due = max(due + interval, time.monotonic())  # no catching up
                time.sleep(max(0.0, due - time.monotonic()))
                failure = None
                try:
                    last = next_reading(collect_status(sink), time.monotonic(), last)
                except (DBAPIError, WalSinkError) as e:
                    failure = str(e).strip().splitlines()[0]
                if live:
                    display.update(_panel(last, interval, failure), refresh=True)
                elif failure:
                    console.print(f"reading failed: {failure}", soft_wrap=True)
                else:
                    _print_line(console, last, as_json)
    except KeyboardInterrupt:
        return


def _print_line(console: Console, reading: Reading, as_json: bool) -> None:
    if as_json:
        console.print(
            json.dumps(reading.to_json(), sort_keys=True),
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
        return
    st = reading.status
    console.print(
        f"{reading.taken} sink {st.sink_id}: pending={st.pending_batches} "
        f"commit_lag_s={_num(st.commit_lag_seconds)} "
        f"last_commit={st.last_commit_at or '-'} "
        f"last_acked={'-' if st.acked_last is None else st.acked_last} "
        f"rows_applied={st.rows_applied} "
        f"rows_per_s={_num(reading.rows_per_second)}",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )


def _panel(reading: Reading, interval: float, failure: str | None = None) -> Group:
    st = reading.status
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    waits = (
        f"; the oldest waits {st.commit_lag_seconds:.1f}s"
        if st.commit_lag_seconds
        else ""
    )
    ago = f"  ({st.lag_seconds:.1f}s ago)" if st.lag_seconds is not None else ""
    rate = (
        "-  (after the next reading)"
        if reading.rows_per_second is None
        else f"{reading.rows_per_second:,.1f}"
    )
    for label, value in (
        ("pending", f"{st.pending_batches} batch(es) staged, not applied{waits}"),
        ("commit lag", f"{_num(st.commit_lag_seconds)} s"),
        (
            "last commit",
            f"{(st.last_commit_at or '-')[:19]}{ago}; acked up to batch "
            f"{'-' if st.acked_last is None else st.acked_last}",
        ),
        ("rows/s", rate),
        ("rows applied", f"{st.rows_applied:,}"),
    ):
        table.add_row(label, Text(value))
    title = Text.assemble(
        (f"sink {st.sink_id}", "bold"),
        f"  at {reading.taken}, every {interval:g}s; Ctrl-C to stop",
    )
    parts: list[object] = [title, table]
    if failure:
        parts.append(Text(f"last reading failed: {failure}", style="red"))
    return Group(*parts)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
