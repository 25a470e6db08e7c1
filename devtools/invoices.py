"""Invoice messages as the classic pipeline sees them, and the totals they should give,
computed here independently of Spark."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

OFFICES = ["11101000000", "11102000000", "11103000000", "13201000000", "14401000000"]
STATUSES = ["0", "1", "2", "3"]


def event_time(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


class InvoiceFeed:
    """Makes messages; ``expected`` holds (swjg_dm, fpzt) -> (hjje, fs) of the
    valid ones."""

    def __init__(self, seed: int = 7, invalid_every: int = 20) -> None:
        self.rng = random.Random(seed)
        self.counter = 0
        self.invalid_every = invalid_every
        self.expected: dict[tuple[str, str], tuple[Decimal, int]] = defaultdict(
            lambda: (Decimal(0), 0)
        )

    def message(
        self, now: datetime | None = None, *, counted: bool = True
    ) -> dict[str, Any]:
        """A new message; ``counted=False`` leaves it out of ``expected``."""
        self.counter += 1
        office, status = self.rng.choice(OFFICES), self.rng.choice(STATUSES)
        amount = Decimal(self.rng.randint(100, 999_999)) / 100
        data = {
            "SWJG_DM": office,
            "FPZT": status,
            "JE": str(amount),
            "KPRQ": event_time(now or datetime.now(timezone.utc)),
        }
        msg: dict[str, Any] = {
            "message": {
                "headers": {"operation": "INSERT", "changeSequence": str(self.counter)},
                "data": data,
                "beforeData": None,
            },
            "type": "DT",
        }
        if not counted or self.counter % self.invalid_every:  # most are complete
            msg["magic"] = "atMSG"
            msg["transactionEventCounter"] = self.counter
            if counted:
                total, count = self.expected[(office, status)]
                self.expected[(office, status)] = (total + amount, count + 1)
        return msg

    def closing(
        self, after: datetime, ahead: timedelta = timedelta(hours=1)
    ) -> dict[str, Any]:
        """A valid invoice dated ``ahead`` later. Spark applies the ``magic`` filter
        before the watermark, so only valid messages move event time: this one closes
        every earlier window, while its own window stays open (not in ``expected``)."""
        return self.message(after + ahead, counted=False)
