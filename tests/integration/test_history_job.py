"""A history table (``stored_as_scd_type = 2``) through the real job, SIGKILLed at
random moments while CDC files arrive: late events, deletes, re-inserts, an upsert
and a delete at one version, events sent again in a later file. Each key ends as
the history of the set of all its events, batches acked once each, in order."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import JOB, SEED, rng, survive_kills_then_drain, write_config
from wal_sink.merge.history import Event, records

pytestmark = pytest.mark.crash

KEYS = [f"k{i}" for i in range(6)]
HISTORY = (
    "CREATE TABLE hist (k VARCHAR(8) NOT NULL, label VARCHAR(8), n BIGINT, "
    "v BIGINT, __START_AT BIGINT NOT NULL, __END_AT BIGINT, "
    "PRIMARY KEY (k, __START_AT)) ENGINE=InnoDB"
)
Sent = tuple[str, str, int, str | None, int | None]  # op, key, version, label, n


def feed(landing: Path, sent: list[Sent], until: threading.Event) -> None:
    """One JSON file every ~0.4 s, at least 10 and on until ``until`` is set, then
    a last one with what was held back. New events take rising versions (one
    counter for every key); about a third are held back and sent in a later file
    (late), and a file often repeats an event of an earlier file. Some versions
    carry an upsert and a delete of one key, each sent on its own. Labels and n
    are drawn from few values, so an upsert often tracks the same as the open
    record. ``sent`` gets every row written, repeats included."""
    held: list[Sent] = []
    version, i = 0, 0
    while i < 10 or not until.is_set():
        rows: list[Sent] = []
        for _ in range(rng.randrange(2, 6)):
            version += 1
            k = rng.choice(KEYS)
            upsert = ("U", k, version, rng.choice("ab"), rng.randrange(3))
            delete = ("D", k, version, None, None)
            made, drawn = [upsert], rng.random()
            if drawn < 0.3:  # a delete, half of them at the upsert's version (a tie)
                made = [delete, upsert] if drawn < 0.15 else [delete]
            for event in made:
                (held if rng.random() < 0.3 else rows).append(event)
        rng.shuffle(held)
        late = rng.randrange(len(held) + 1)
        rows += held[:late]
        del held[:late]
        if sent and rng.random() < 0.5:
            rows.append(rng.choice(sent))  # the same event in a second file
        write_file(landing, f"h{i:03d}", rows)
        sent += rows
        time.sleep(0.4)
        i += 1
    write_file(landing, f"h{i:03d}", held)
    sent += held


def write_file(landing: Path, name: str, rows: list[Sent]) -> None:
    """The rows in a shuffled order, the file appearing whole."""
    lines = [
        json.dumps({"op": op, "k": k, "v": v, "label": label, "n": n}) + "\n"
        for op, k, v, label, n in rng.sample(rows, len(rows))
    ]
    tmp = landing / f".{name}.tmp"
    tmp.write_text("".join(lines))
    tmp.rename(landing / f"{name}.json")


def expected_rows(sent: list[Sent], untracked: set[str]) -> list[tuple]:
    """``records`` of every key's events, as the table's rows."""
    rows = []
    for k in KEYS:
        events = [
            Event(v, op == "D", {} if op == "D" else {"label": lb, "n": n, "v": v})
            for op, key, v, lb, n in set(sent)
            if key == k
        ]
        for r in records(events, lambda c: c != "v" and c not in untracked):
            values = r.values
            rows.append((k, values["label"], values["n"], values["v"], r.start, r.end))
    return rows


def as_the_docs_say(sent: list[Sent], untracked: set[str]) -> list[tuple]:
    """The same rows by docs/merge.md's words, said another way: in version order,
    an upsert at a version with a delete being no event, an upsert opens a record
    unless the event before it is an upsert whose tracked columns equal its own; a
    record ends at the first delete or opening upsert after it, with the values of
    the last upsert before that."""
    tracked = [i for i, c in enumerate(("label", "n")) if c not in untracked]
    rows = []
    for k in KEYS:
        # (version, is a delete, (label, n)), one of each event
        every = {(v, op == "D", (lb, n)) for op, key, v, lb, n in sent if key == k}
        deleted = {v for v, delete, _ in every if delete}
        ordered = sorted(e for e in every if e[1] or e[0] not in deleted)

        def opens(at: int) -> bool:
            _, delete, values = ordered[at]
            before = ordered[at - 1] if at else (None, True, None)
            return not delete and (
                before[1] or any(values[i] != before[2][i] for i in tracked)
            )

        for at in [i for i in range(len(ordered)) if opens(i)]:
            end = next(
                (j for j in range(at + 1, len(ordered)) if ordered[j][1] or opens(j)),
                len(ordered),
            )
            last = max(j for j in range(at, end) if not ordered[j][1])
            v, _, (label, n) = ordered[last]
            stop = ordered[end][0] if end < len(ordered) else None
            rows.append((k, label, n, v, ordered[at][0], stop))
    return rows


@pytest.mark.parametrize(
    ("untracked", "kills"), [(set(), 2), ({"n"}, 1)], ids=["all", "except_n"]
)
def test_a_history_through_killed_jobs_ends_as_the_history_of_all_events(
    db, fresh, tmp_path, untracked, kills
):
    print(f"seed {SEED}")
    fresh(HISTORY)
    landing = tmp_path / "landing"
    landing.mkdir()
    except_n = 'track_history_except_column_list = ["n"]' if untracked else ""
    config = write_config(
        tmp_path / "hist.toml",
        db,
        table="hist",
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "op STRING, k STRING, label STRING, n BIGINT, v BIGINT"
options = {{ maxFilesPerTrigger = 2 }}""",
        mysql=f'version_column = "v"\nstored_as_scd_type = 2\n{except_n}',
        job=JOB,
        sections='[cdc]\nop_column = "op"\norder_by = "v"\n',
    )
    sent: list[Sent] = []
    survive_kills_then_drain(
        config,
        tmp_path / "job.log",
        lambda until: feed(landing, sent, until),
        rounds=kills,
    )
    expected = expected_rows(sent, untracked)
    assert as_the_docs_say(sent, untracked) == expected
    rows = "SELECT k, label, n, v, __START_AT, __END_AT FROM hist ORDER BY 1, 5"
    assert db.rows(rows) == expected, f"seed {SEED}"
    acks = db.rows(
        "SELECT batch_id, row_count + deleted_count + skipped_count, quarantined "
        "FROM wal_sink_ack ORDER BY batch_id"
    )
    assert [a[0] for a in acks] == list(range(len(acks))), "each batch once, in order"
    assert sum(a[1] for a in acks) == len(sent), "every row counted once"
    assert sum(a[2] for a in acks) == 0
