"""The sink held to its reference model (tests/reference_model.py; I10 in
docs/protocol.md): a hypothesis state machine generates a target shape
(tests/fuzzing/grammar.py), creates it in a fresh MariaDB database, stages batches
of records and runs the operators' commands and crashes through the REAL committer
and CLI library code (tests/fuzzing/real.py), and after every step compares every
target row, the ack rows and the open quarantine entries with the model.

Two modes, chosen by ``FUZZ_PROFILE``:

- ``ci`` (default, ``make test``): derandomized, a fixed number of examples (about a
  minute on the 2-core reference machine);
- ``fuzz`` (``make fuzz FUZZ_MINUTES=10``): random examples until the time is up or
  the first failure, which is shrunk and printed as a reproducer (the target's DDL,
  each sink's TOML, each batch's records and the steps). ``FUZZ_EXCLUDE`` keeps
  features of the grammar out (grammar.py's FEATURES).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, note, reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.fuzzing.grammar import Scenario, config_dict, excluded, records, scenarios
from tests.fuzzing.grammar import toml as as_toml
from tests.fuzzing.real import RealSink, utc
from tests.reference_model import ReferenceModel, Routed
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError

EXCLUDED = excluded()
CI_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
"""Examples of the deterministic run: about a minute here."""
COMMON = dict(
    deadline=None,
    database=None,
    stateful_step_count=20,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, derandomize=True, print_blob=False, **COMMON
)
settings.register_profile(
    "fuzz", max_examples=10, derandomize=False, print_blob=True, **COMMON
)
"""A fuzz run's rounds are short, so that it ends near its time: an example that
idled once the time was up drew less than the same example had, which hypothesis
reports as a flaky strategy."""

CRASHES = tuple(
    crash
    for crash in (
        ("commit.before_commit", "raise"),
        ("commit.after_commit", "lost-once"),
        ("commit.after_commit", "raise"),
    )
    if crash[1] != "raise"
    or crash[0] != "commit.after_commit"
    or "crash_after_commit" not in EXCLUDED
)
TOMBSTONES = "t_tombstones"


class Clock:
    """When the run started, how many examples it made, and its first failure."""

    started = time.monotonic()
    deadline: float | None = None
    examples = 0
    first_failure: str | None = None
    first_kind: str | None = None
    """What failed first: shrinking keeps to it (other failures are rejected)."""
    spent: Counter = Counter()
    """Seconds spent in each rule (and the comparisons after it)."""

    @classmethod
    def failed(cls, error: BaseException) -> None:
        """Time the run's first failure; reject an example failing otherwise, so
        that shrinking does not slip to another bug."""
        kind = _kind(error)
        if cls.first_kind is None:
            cls.first_kind = kind
        elif kind != cls.first_kind:
            reject()
        if cls.first_failure is None:
            cls.first_failure = (
                f"first failure after {time.monotonic() - cls.started:.1f} s, "
                f"example {cls.examples}: {type(error).__name__}: "
                f"{str(error).splitlines()[0][:300] if str(error) else ''}"
            )
            print(f"\nFUZZ {cls.first_failure}", file=sys.__stderr__, flush=True)


class Disagreement(AssertionError):
    """The sink did not do what the model says (``kind``: what differed)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _kind(error: BaseException) -> str:
    """A failure's kind: what differed, or the exception and where it was raised."""
    if isinstance(error, Disagreement):
        return error.kind
    where = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__} at {where.filename}:{where.lineno}"


def _named(reasons: list[str]) -> set[str]:
    """What a refusal's one line must name for one of the model's reasons: one of
    their columns, or the tombstones."""
    words = {w for r in reasons for w in re.findall(r"'([^']+)'", r)}
    guarded = any("tombstones" in r for r in reasons)
    return words | ({"tombstones"} if guarded else set())


def step(fn):
    """A rule's body: its first failure is timed; every row is compared with the
    model after it."""

    def wrapper(self, *args: Any, **kwargs: Any) -> None:
        began = time.monotonic()
        try:
            fn(self, *args, **kwargs)
            self.check()
        except Exception as e:  # not hypothesis's own control flow (StopTest)
            Clock.failed(e)
            raise
        finally:
            Clock.spent[fn.__name__] += time.monotonic() - began

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class ModelFuzz(RuleBasedStateMachine):
    """One example: a scenario's target in a database of its own, its sinks."""

    server: Any = None
    base: Path = Path()
    numbers = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.scenario: Scenario | None = None
        self.real: dict[str, RealSink] = {}
        self.defaults_off = False
        self.database: str | None = None
        self.model: ReferenceModel | None = None
        Clock.examples += 1

    # -- set-up and tear-down ------------------------------------------------------

    @initialize(scenario=scenarios(EXCLUDED))
    def setup(self, scenario: Scenario) -> None:
        try:
            self._setup(scenario)
            self.check()
        except Exception as e:
            Clock.failed(e)
            raise

    def _setup(self, scenario: Scenario) -> None:
        self.scenario = scenario
        number = next(self.numbers)
        self.database = f"fuzz{number}"
        self.home = self.base / self.database
        shutil.rmtree(self.home, ignore_errors=True)
        self.server.create_database(self.database)
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION explicit_defaults_for_timestamp = ON")
            for statement in scenario.ddl:
                cur.execute(statement)
        note("-- target:\n" + ";\n".join(scenario.ddl) + ";")
        if scenario.explicit_defaults_off:
            with self.root() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL explicit_defaults_for_timestamp = OFF")
            self.defaults_off = True
            note("-- server: SET GLOBAL explicit_defaults_for_timestamp = OFF")
        self.model = ReferenceModel(
            scenario.target, list(scenario.sinks), set(scenario.parents)
        )
        url = self.server.sink_url(self.database)
        for sink in scenario.sinks:
            raw = config_dict(sink, url, str(self.home / sink.sink_id / "wal"))
            config = config_from_dict(raw, base_dir=self.home)
            self.real[sink.sink_id] = RealSink(config, scenario.target, sink)
            why = self.model.refusal(sink.sink_id)
            note(
                f"-- {sink.sink_id}.toml (stream: {', '.join(sink.stream)}; model: "
                f"{'refused: ' + why if why else 'runs'})\n{as_toml(raw)}"
            )
        self.rids = itertools.count(1)
        # Sinks guarding deletes with tombstones start first (their tombstone table
        # exists before any other sink starts), as a live CDC job runs before a
        # backfill is added.
        for sink in scenario.sinks:
            if sink.guarded and self.model.refusal(sink.sink_id) is None:
                self.job(sink.sink_id)

    def teardown(self) -> None:
        for real in self.real.values():
            real.close()
        if self.defaults_off:
            with self.root() as conn, conn.cursor() as cur:
                cur.execute("SET GLOBAL explicit_defaults_for_timestamp = ON")
        if self.database is not None:
            with self.server.root() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            shutil.rmtree(self.home, ignore_errors=True)

    def root(self):
        return self.server.root(self.database)

    # -- helpers -------------------------------------------------------------------

    def sink_ids(self) -> list[str]:
        return [s.sink_id for s in self.scenario.sinks] if self.scenario else []

    def running(self) -> list[str]:
        """Sinks the model lets run."""
        return [s for s in self.sink_ids() if self.model.refusal(s) is None]

    def started(self) -> list[str]:
        """Running sinks whose tables exist (some instance took the lease)."""
        return [s for s in self.running() if self.real[s].started]

    def job(self, sink_id: str) -> None:
        """Make sure the sink's job runs; a job that starts recovers everything
        pending."""
        real = self.real[sink_id]
        if real.job is None:
            real.start_job()
            self.model.apply(sink_id)

    def pick(self, data: st.DataObject, choices: list[str]) -> str:
        return choices[0] if len(choices) == 1 else data.draw(st.sampled_from(choices))

    def refused(self, sink_id: str, action) -> None:
        """The model says the sink is refused: ``action`` must raise ConfigError
        (one line) and change nothing."""
        try:
            action()
        except ConfigError as e:
            if "\n" in str(e):
                raise Disagreement("refusal", f"a refusal of more lines: {e}") from e
            reasons = self.model.refusals(sink_id)
            if not any(word in str(e) for word in _named(reasons)):
                raise Disagreement(
                    "refusal for another reason",
                    f"model: {sink_id} is refused ({'; '.join(reasons)}); "
                    f"the sink refused: {e}",
                ) from e
            return
        finally:
            self.real[sink_id].stop_job()
        why = self.model.refusal(sink_id)
        raise Disagreement(
            f"refusal: {why.split(':')[0]}",  # what is refused, not its columns
            f"model: {sink_id} is refused at start ({why}); the sink ran",
        )

    # -- rules -----------------------------------------------------------------------

    @rule(data=st.data())
    @step
    def stage(self, data: st.DataObject) -> None:
        """A sink stages its next batch."""
        sink_id = self.pick(data, self.sink_ids())
        sink = self.model.sinks[sink_id]
        drawn = data.draw(records(self.scenario, sink), label="records")
        batch = []
        for seq, record in enumerate(drawn):
            record = {**record, "rid": next(self.rids)}
            if sink.cdc:
                record[sink.cdc.order_by] = seq
            batch.append({c: record.get(c) for c in sink.columns})
        batch_id = self.model.stage(sink_id, batch)
        self.real[sink_id].stage(batch_id, batch)
        note(f"-- {sink_id} batch {batch_id}: {batch}")

    def _pending(self) -> list[str]:
        return [s for s in self.sink_ids() if self.model.pending(s)]

    @precondition(lambda self: self._pending())
    @rule(data=st.data())
    @step
    def apply(self, data: st.DataObject) -> None:
        """The job applies its next pending batches (one group)."""
        sink_id = self.pick(data, self._pending())
        real = self.real[sink_id]
        if self.model.refusal(sink_id) is not None:
            ids = self.model.pending(sink_id)
            self.refused(sink_id, lambda: real.apply(ids))
            return
        self.job(sink_id)
        pending = self.model.pending(sink_id)
        if pending:
            count = data.draw(st.integers(1, len(pending)), label="batches")
            real.apply(pending[:count])
            self.model.apply(sink_id, count)

    def _pending_running(self) -> list[str]:
        return [s for s in self.running() if self.model.pending(s)]

    @precondition(lambda self: "crash" not in EXCLUDED and self._pending_running())
    @rule(data=st.data(), crash=st.sampled_from(CRASHES))
    @step
    def crash(self, data: st.DataObject, crash: tuple[str, str]) -> None:
        """The job fails at a commit point and restarts (recovering)."""
        sink_id = self.pick(data, self._pending_running())
        self.job(sink_id)
        pending = self.model.pending(sink_id)
        if pending:
            count = data.draw(st.integers(1, len(pending)), label="batches")
            self.real[sink_id].crash(pending[:count], *crash)
            self.model.apply(sink_id)

    @precondition(lambda self: self._pending_running())
    @rule(data=st.data())
    @step
    def recover(self, data: st.DataObject) -> None:
        """``wal-sink recover`` (fencing the job)."""
        sink_id = self.pick(data, self._pending_running())
        self.real[sink_id].recover()
        self.model.apply(sink_id)

    def _replayable(self) -> list[str]:
        return [
            s
            for s in self.started()
            if any(b in self.model.state[s].acks for b in self.model.state[s].batches)
        ]

    @precondition(lambda self: "replay" not in EXCLUDED and self._replayable())
    @rule(data=st.data())
    @step
    def replay(self, data: st.DataObject) -> None:
        """``wal-sink replay --from N --to M --force``."""
        sink_id = self.pick(data, self._replayable())
        state = self.model.state[sink_id]
        acked = sorted(b for b in state.batches if b in state.acks)
        first = data.draw(st.sampled_from(acked), label="first")
        last = data.draw(st.integers(first, state.next_batch - 1), label="last")
        self.real[sink_id].replay(first, last)
        self.model.replay(sink_id, first, last)

    @precondition(lambda self: "purge" not in EXCLUDED and self.started())
    @rule(data=st.data())
    @step
    def purge(self, data: st.DataObject) -> None:
        """``wal-sink purge --before N``."""
        sink_id = self.pick(data, self.started())
        before = data.draw(
            st.integers(0, self.model.state[sink_id].next_batch), label="before"
        )
        self.real[sink_id].purge(before)
        self.model.purge(sink_id, before)

    @precondition(lambda self: "retry" not in EXCLUDED and self.started())
    @rule(data=st.data())
    @step
    def retry(self, data: st.DataObject) -> None:
        """``wal-sink quarantine retry``; sometimes failing at a commit point of a
        batch's transaction first, then run again."""
        sink_id = self.pick(data, self.started())
        batches = sorted({e.batch_id for e in self.model.open_entries(sink_id)})
        fault = None
        if batches and "crash" not in EXCLUDED and data.draw(st.booleans()):
            point = data.draw(
                st.sampled_from(("retry.before_commit", "retry.after_commit"))
            )
            fault = (point, data.draw(st.sampled_from(batches), label="batch"))
        self.real[sink_id].retry(fault)
        if fault is not None:
            through = fault[1] - (fault[0] == "retry.before_commit")
            self.model.retry(sink_id, through)
        self.model.retry(sink_id)

    def _set_aside_ready(self) -> list[str]:
        return [s for s in self.started() if self.model.pending(s)]

    @precondition(
        lambda self: "quarantine_batch" not in EXCLUDED and self._set_aside_ready()
    )
    @rule(data=st.data())
    @step
    def quarantine_batch(self, data: st.DataObject) -> None:
        """``wal-sink quarantine-batch N`` of the lowest pending batch."""
        sink_id = self.pick(data, self._set_aside_ready())
        batch_id = self.model.pending(sink_id)[0]
        self.real[sink_id].set_aside(batch_id)
        self.model.set_aside(sink_id, batch_id)

    def _missing_parents(self) -> list[int]:
        if self.scenario is None:
            return []
        return [p for p in self.scenario.missing_parents if p not in self.model.parents]

    @precondition(lambda self: self._missing_parents())
    @rule(data=st.data())
    @step
    def fix_parent(self, data: st.DataObject) -> None:
        """The operator adds a missing parent row."""
        parent = data.draw(st.sampled_from(self._missing_parents()), label="parent")
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO parent VALUES (%s)", (parent,))
        self.model.add_parent(parent)

    def _tombstones(self) -> bool:
        return self.model is not None and bool(self.model.tombstones)

    def _has_child_table(self) -> bool:
        return self.scenario is not None and self.scenario.target.child is not None

    @precondition(lambda self: self._has_child_table() and self.model.rows)
    @rule(data=st.data())
    @step
    def add_child(self, data: st.DataObject) -> None:
        """A child row comes to reference a target row."""
        key = data.draw(st.sampled_from(sorted(self.model.rows, key=repr)))
        column = self.scenario.target.key[0]
        stored = self.model.rows[key][column]
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO child (ref) VALUES (%s)", (stored,))
        self.model.add_child(key)

    @precondition(lambda self: self._has_child_table() and self.model.children)
    @rule()
    @step
    def remove_children(self) -> None:
        """The operator removes the child rows (so a refused delete can retry)."""
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM child")
        self.model.remove_children()

    @precondition(lambda self: "expiry" not in EXCLUDED and self._tombstones())
    @rule()
    @step
    def time_passes(self) -> None:
        """Every tombstone becomes older than the retention (the next purge of its
        sink removes it)."""
        with self.root() as conn, conn.cursor() as cur:
            cur.execute(
                f"UPDATE {TOMBSTONES} SET _wal_deleted_at = NOW(6) - INTERVAL 30 DAY"
            )
        self.model.expire_tombstones()

    # -- the comparison ----------------------------------------------------------

    def check(self) -> None:
        """Every target row, each sink's ack rows and open quarantine entries."""
        self.check_rows()
        for sink_id in self.sink_ids():
            self.check_acks(sink_id)
            if sink_id in self.started():
                self.check_quarantine(sink_id)

    def check_rows(self) -> None:
        target = self.scenario.target
        columns = list(dict.fromkeys([*target.key, *self.model.owned]))
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute(f"SELECT {', '.join(columns)} FROM t")
            found = [dict(zip(columns, map(utc, r))) for r in cur.fetchall()]
        actual: dict[tuple, dict] = {}
        for row in found:
            key = tuple(target.column(k).collate(row[k]) for k in target.key)
            if key in actual:
                raise Disagreement(
                    "rows", f"two rows of key {key}: {actual[key]}, {row}"
                )
            actual[key] = row
        expected = {
            k: {c: row.get(c) for c in columns} for k, row in self.model.rows.items()
        }
        if actual != expected:
            raise Disagreement("rows", _diff(expected, actual))
        if any(s.routed for s in self.scenario.sinks):
            self.check_u_rows()

    def check_u_rows(self) -> None:
        """A routed sink's second table."""
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("SELECT uid, rid, ref, w FROM u")
            actual = {r[0]: dict(zip(Routed.COLUMNS, r)) for r in cur.fetchall()}
        if actual != self.model.u_rows:
            raise Disagreement("u rows", "table u: " + _diff(self.model.u_rows, actual))

    def check_acks(self, sink_id: str) -> None:
        with self.root() as conn, conn.cursor() as cur:
            cur.execute("SHOW TABLES LIKE 'wal_sink_ack'")
            if not cur.fetchall():
                found = {}
            else:
                cur.execute(
                    "SELECT batch_id, row_count, deleted_count, quarantined, "
                    "skipped_count, state FROM wal_sink_ack WHERE sink_id = %s",
                    (sink_id,),
                )
                found = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
        expected = {
            b: (a.rows, a.deleted, a.quarantined, a.skipped, a.state)
            for b, a in self.model.state[sink_id].acks.items()
        }
        if found != expected:
            raise Disagreement(
                "acks",
                f"{sink_id}'s ack rows (rows, deleted, quarantined, skipped, state):"
                f" model {expected}, sink {found}",
            )

    def check_quarantine(self, sink_id: str) -> None:
        found = self.real[sink_id].open_entries()
        expected = Counter(
            (e.batch_id, e.record.get("rid")) for e in self.model.open_entries(sink_id)
        )
        if found != expected:
            raise Disagreement(
                "quarantine",
                f"{sink_id}'s open quarantine entries (batch, rid): model "
                f"{sorted(expected.elements())}, sink {sorted(found.elements())}",
            )


def _diff(expected: dict, actual: dict) -> str:
    lines = ["target rows differ (model / sink):"]
    for key in sorted(set(expected) | set(actual), key=repr):
        want, got = expected.get(key), actual.get(key)
        if want != got:
            lines.append(f"  key {key}: model {want} / sink {got}")
    return "\n".join(lines)


def test_fuzz_targets_and_steps_match_the_reference_model(mariadb, tmp_path):
    """Random target shapes, batches, operator steps and crashes end, row by row,
    as the reference model says."""
    profile = os.environ.get("FUZZ_PROFILE", "ci")
    ModelFuzz.server = mariadb
    ModelFuzz.base = tmp_path
    quiet = logging.getLogger("wal_sink")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    Clock.started = time.monotonic()
    try:
        if profile != "fuzz":
            run_state_machine_as_test(ModelFuzz, settings=settings.get_profile(profile))
            return
        minutes = float(os.environ.get("FUZZ_MINUTES", "10"))
        Clock.deadline = Clock.started + 60 * minutes
        while time.monotonic() < Clock.deadline:
            run_state_machine_as_test(ModelFuzz, settings=settings.get_profile("fuzz"))
        spent = ", ".join(f"{n} {s:.0f} s" for n, s in Clock.spent.most_common())
        print(
            f"\nFUZZ no failure in {minutes:g} min, {Clock.examples} examples "
            f"({spent})",
            file=sys.__stderr__,
        )
    finally:
        quiet.setLevel(level)
