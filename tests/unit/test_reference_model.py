"""The reference model (tests/reference_model.py) on hand-made examples: each rule of
the merge semantics once, so that a fuzz failure can be blamed on the sink, not on
the model."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from tests.reference_model import (
    APPLIED,
    CHILD,
    DELETED,
    END_AT,
    FLOOR,
    FOLDED,
    IN_PLACE,
    KEPT_NULL,
    NO_VERSION,
    NULL,
    NULL_KEY,
    QUARANTINED,
    RANGE,
    SKIPPED,
    SPLIT,
    START_AT,
    TRUNCATE,
    TRUNCATE_STALE,
    TRUNCATED,
    Ack,
    Cdc,
    Column,
    ReferenceModel,
    Routed,
    Sink,
    Target,
)

ID = Column("id", "bigint", nullable=False)
N = Column("n", "bigint")
LABEL = Column("label", "varchar")
V = Column("v", "bigint")
SEQ = Column("seq", "bigint")


def target(*columns: Column, key=("id",), **shape) -> Target:
    return Target(
        columns=(ID, *columns) if key == ("id",) else columns, key=key, **shape
    )


def sink(stream, merge=(), version=None, cdc=False, sink_id="s1", **more) -> Sink:
    return Sink(
        sink_id=sink_id,
        stream=tuple(stream) + (("op",) if cdc else ()),
        key=more.pop("key", ("id",)),
        merge=tuple(merge),
        version=version,
        cdc=Cdc() if cdc else None,
        **more,
    )


def run(model: ReferenceModel, *batches: list[dict], sink_id: str = "s1") -> None:
    for records in batches:
        model.stage(sink_id, records)
    model.apply(sink_id)


def test_upsert_inserts_new_keys_then_overwrites_adds_and_keeps():
    created = Column("created", "datetime")
    model = ReferenceModel(
        target(N, LABEL, created),
        [sink(["id", "n", "label", "created"], [("n", "add"), ("created", "keep")])],
    )
    first, later = datetime(2001, 1, 1), datetime(2002, 1, 1)
    run(
        model,
        [{"id": 1, "n": 2, "label": "x", "created": first}],
        [{"id": 1, "n": 3, "label": "y", "created": later}],
    )
    assert model.rows == {(1,): {"id": 1, "n": 5, "label": "y", "created": first}}


def test_version_guard_overwrites_at_or_above_the_stored_version_only():
    model = ReferenceModel(
        target(N, LABEL, V), [sink(["id", "n", "label", "v"], [("n", "add")], "v")]
    )
    run(
        model,
        [{"id": 1, "n": 1, "label": "a", "v": 5}],
        [{"id": 1, "n": 1, "label": "older", "v": 4}],
        [{"id": 1, "n": 1, "label": "none", "v": None}],
        [{"id": 1, "n": 1, "label": "same", "v": 5}],
    )
    assert model.rows[(1,)] == {"id": 1, "n": 4, "label": "same", "v": 5}
    run(
        model,
        [{"id": 2, "n": 1, "label": "a", "v": None}],
        [{"id": 2, "n": 1, "label": "b", "v": None}],
    )
    assert model.rows[(2,)]["label"] == "b", "NULL overwrites a NULL version"


def test_add_of_null_changes_nothing_and_a_null_total_takes_the_value():
    model = ReferenceModel(target(N), [sink(["id", "n"], [("n", "add")])])
    run(model, [{"id": 1, "n": None}], [{"id": 1, "n": None}])
    assert model.rows[(1,)]["n"] is None
    run(model, [{"id": 1, "n": 4}])
    assert model.rows[(1,)]["n"] == 4


@pytest.mark.parametrize(
    "collation, keys, rows",
    [
        ("utf8mb4_general_ci", ["a", "A", "a  "], {("a",): "a"}),
        ("utf8mb4_bin", ["a", "A", "a  "], {("a",): "a", ("A",): "A"}),
    ],
)
def test_keys_compare_by_collation_and_keep_their_first_text(collation, keys, rows):
    k = Column("k", "varchar", nullable=False, collation=collation)
    model = ReferenceModel(
        Target((k, N), ("k",)), [sink(["k", "n"], [("n", "add")], key=("k",))]
    )
    run(model, [{"k": key, "n": 1} for key in keys])
    assert {key: row["k"] for key, row in model.rows.items()} == rows
    assert sum(row["n"] for row in model.rows.values()) == 3


def test_auto_increment_zero_is_a_key_like_any_other():
    auto = Column("id", "bigint", nullable=False, auto_increment=True)
    model = ReferenceModel(
        Target((auto, N), ("id",)), [sink(["id", "n"], [("n", "add")])]
    )
    run(model, [{"id": 0, "n": 1}, {"id": 0, "n": 2}, {"id": None, "n": 3}])
    assert model.rows == {(0,): {"id": 0, "n": 3}}
    assert model.state["s1"].acks[0] == Ack(rows=2, quarantined=1)


def test_values_that_do_not_fit_are_quarantined_and_the_rest_goes_on():
    score = Column("score", "double")
    required = Column("req", "int", nullable=False, has_default=False)
    parent = Column("parent_id", "bigint")
    model = ReferenceModel(
        target(N, LABEL, score, required, parent, fk_column="parent_id"),
        [sink(["id", "n", "label", "score", "req", "parent_id"], [("n", "add")])],
        parents={1},
    )
    ok = {"id": 1, "n": 1, "label": "x", "score": 0.5, "req": 1, "parent_id": 1}
    bad = [
        {**ok, "id": None},
        {**ok, "score": float("nan")},
        {**ok, "label": "123456789"},
        {**ok, "req": None},
        {**ok, "parent_id": 2},
        {**ok, "n": 2**63 - 1},  # adds past BIGINT's maximum
    ]
    run(model, [ok, *bad])
    assert model.rows == {(1,): ok}
    assert model.state["s1"].acks[0] == Ack(rows=1, quarantined=6)
    model.add_parent(2)
    model.retry("s1")
    assert model.rows[(1,)]["parent_id"] == 2, "the fixed parent lets it land"


def test_add_into_unsigned_applies_a_negative_delta_whose_sum_fits():
    unsigned = Column("n", "uint")
    model = ReferenceModel(target(unsigned), [sink(["id", "n"], [("n", "add")])])
    run(model, [{"id": 1, "n": -1}, {"id": 2, "n": 5}, {"id": 2, "n": -3}])
    run(model, [{"id": 2, "n": -3}])
    assert model.rows == {(2,): {"id": 2, "n": 2}}
    assert [a.quarantined for a in model.state["s1"].acks.values()] == [1, 1]


def test_unique_conflicts_first_wins_and_a_freed_value_is_free():
    model = ReferenceModel(
        target(LABEL, unique=(("label",),)),
        [sink(["id", "label"], unique_conflicts="quarantine")],
    )
    run(
        model,
        [
            {"id": 1, "label": "x"},
            {"id": 2, "label": "X "},  # the same value, case- and pad-insensitively
            {"id": 1, "label": "y"},  # 1 moves away from x ...
            {"id": 3, "label": "x"},  # ... which is free again
            {"id": 4, "label": None},
            {"id": 5, "label": None},  # NULLs never collide
        ],
    )
    assert {k[0]: r["label"] for k, r in model.rows.items()} == {
        1: "y",
        3: "x",
        4: None,
        5: None,
    }


def cdc_model(*sinks: Sink, child: str | None = None) -> ReferenceModel:
    return ReferenceModel(target(N, V, SEQ, child=child), list(sinks))


def cdc_sink(sink_id="s1") -> Sink:
    return sink(["id", "n", "v", "seq"], [("n", "add")], "v", cdc=True, sink_id=sink_id)


def up(key, v, n=1, op="U"):
    return {"id": key, "n": n, "v": v, "op": op}


def delete(key, v):
    return {"id": key, "n": None, "v": v, "op": "D"}


def test_a_delete_leaves_a_tombstone_that_skips_older_upserts():
    model = cdc_model(cdc_sink())
    run(model, [up(1, 5), delete(1, 7), up(1, 7), up(1, None), up(2, 3)])
    run(model, [delete(2, 2)], [up(1, 8)])
    assert model.rows == {
        (1,): {"id": 1, "n": 1, "v": 8, "seq": None},
        (2,): {"id": 2, "n": 1, "v": 3, "seq": None},  # an older delete: no effect
    }
    assert model.state["s1"].acks[0] == Ack(rows=2, deleted=1, skipped=2)
    model.apply_record("s1", delete(1, None))
    assert (1,) in model.rows, "a delete without a version spares a versioned row"


def test_tombstones_belong_to_the_table_and_a_guardless_sink_is_refused():
    live, backfill = cdc_sink("live"), cdc_sink("backfill")
    model = cdc_model(live, backfill)
    run(model, [up(1, 1), delete(1, 10)], sink_id="live")
    assert model.apply_record("backfill", up(1, 7))[0] == SKIPPED
    plain = sink(["id", "n", "v"], [("n", "add")], "v", sink_id="plain")
    assert cdc_model(live, plain).refusal("plain") is not None
    assert cdc_model(plain).refusal("plain") is None


@pytest.mark.parametrize("action, present", [("restrict", True), ("cascade", False)])
def test_a_delete_a_child_restricts_is_quarantined_and_leaves_no_tombstone(
    action, present
):
    model = cdc_model(cdc_sink(), child=action)
    run(model, [up(1, 1)])
    model.add_child((1,))
    run(model, [delete(1, 5), up(1, 3)])
    assert ((1,) in model.rows) is present
    assert bool(model.tombstones) is not present
    if present:
        assert model.rows[(1,)]["n"] == 2, "no tombstone: the upsert applies"
        model.remove_children()
        model.retry("s1")
        assert model.rows == {} and model.tombstones


def test_replay_adds_again_and_supersedes_its_earlier_entries_for_good():
    model = ReferenceModel(target(N), [sink(["id", "n"], [("n", "add")])])
    run(model, [{"id": 1, "n": 1}, {"id": None, "n": 1}])
    model.replay("s1", 0, 0)
    assert model.rows[(1,)]["n"] == 2
    assert [e.superseded for e in model.state["s1"].entries] == [True, False]
    run(model, [{"id": 1, "n": 5}])
    model.purge("s1", before=1)
    assert list(model.state["s1"].acks) == [1], "the newest ack row stays"
    assert len(model.open_entries("s1")) == 1, "still superseded after the purge"


def test_purge_expires_tombstones_but_not_of_keys_with_open_upserts():
    model = cdc_model(cdc_sink())
    run(model, [delete(1, 5), delete(2, 5), up(2, 9, n=2**63 - 1), up(2, 9)])
    model.expire_tombstones()
    model.purge("s1", before=0)
    assert list(model.tombstones) == [(2,)]
    assert model.apply_record("s1", up(1, 1))[0] == APPLIED


def test_retry_goes_through_the_version_guard_once():
    model = ReferenceModel(
        target(N, LABEL, V), [sink(["id", "n", "label", "v"], [("n", "add")], "v")]
    )
    run(model, [{"id": 1, "n": 1, "label": "123456789", "v": 1}])
    run(model, [{"id": 1, "n": 1, "label": "new", "v": 2}])
    model.target = target(N, Column("label", "varchar", length=16), V)
    model.retry("s1")
    model.retry("s1")
    assert model.rows[(1,)] == {"id": 1, "n": 2, "label": "new", "v": 2}


def test_set_aside_acks_the_lowest_pending_batch_as_quarantined():
    model = ReferenceModel(target(N), [sink(["id", "n"], [("n", "add")])])
    model.stage("s1", [{"id": 1, "n": 1}])
    model.stage("s1", [{"id": 2, "n": 1}])
    with pytest.raises(ValueError):
        model.set_aside("s1", 1)
    model.set_aside("s1", 0)
    assert model.pending("s1") == [1]
    assert model.state["s1"].acks[0] == Ack(quarantined=1, state="quarantined")
    model.retry("s1")
    assert model.rows == {(1,): {"id": 1, "n": 1}}


TS = Column("ts", "timestamp", nullable=False)
A = Column("a", "int", nullable=False)


@pytest.mark.parametrize(
    "columns, stream, merge, shape, refused",
    [
        ((N, V), ["id", "n"], [("n", "add")], {}, "absent"),
        ((N, V), ["id", "v"], [("n", "add")], {}, "absent"),
        (
            (Column("c", "timestamp", on_update=True),),
            ["id", "c"],
            [("c", "keep")],
            {},
            "ON UPDATE",
        ),
        ((Column("c", "timestamp", on_update=True),), ["id", "c"], [], {}, None),
        ((Column("g", "bigint", generated=True),), ["id", "g"], [], {}, "generated"),
        (
            (Column("r", "int", nullable=False, has_default=False),),
            ["id"],
            [],
            {},
            "NOT NULL",
        ),
        ((LABEL,), ["id", "label"], [], {"before_trigger_sets": ("label",)}, "BEFORE"),
        ((LABEL,), ["id"], [], {"before_trigger_sets": ("label",)}, None),
        ((LABEL,), ["id", "label"], [], {"unique": (("label",),)}, "unique"),
        ((LABEL,), ["id"], [], {"unique": (("label",),)}, None),
        ((N,), ["id", "n"], [], {"fk_column": "n"}, None),
    ],
)
def test_refusals_follow_the_targets_shape(columns, stream, merge, shape, refused):
    version = "v" if any(c.name == "v" for c in columns) else None
    model = ReferenceModel(target(*columns, **shape), [sink(stream, merge, version)])
    why = model.refusal("s1")
    assert (why is None) if refused is None else refused in why


def test_an_on_update_key_column_is_refused():
    ts = Column("ts", "timestamp", nullable=False, on_update=True)
    model = ReferenceModel(
        Target((A, ts, N), ("a", "ts")),
        [sink(["a", "ts", "n"], [("n", "add")], key=("a", "ts"))],
    )
    assert "ON UPDATE" in model.refusal("s1")


def test_a_null_version_into_a_not_null_timestamp_is_quarantined():
    v = Column("v", "timestamp", nullable=False, has_default=False)
    model = ReferenceModel(target(N, v), [sink(["id", "n", "v"], [], "v")])
    t1, t3 = datetime(2001, 1, 1), datetime(2003, 1, 1)
    outcomes = [
        model.apply_record("s1", {"id": 1, "n": n, "v": version})[0]
        for n, version in ((1, t1), (2, None), (3, t3))
    ]
    assert outcomes == [APPLIED, QUARANTINED, APPLIED]
    assert model.rows[(1,)] == {"id": 1, "n": 3, "v": t3}


def routed_model(w_policy: str = "add") -> ReferenceModel:
    return ReferenceModel(
        target(N), [sink(["id", "n"], cdc=True, routed=Routed(w_policy))]
    )


def t_row(id_: int, op: str = "I") -> dict:
    return {"tbl": "t", "id": id_, "n": 1, "op": op}


def u_row(uid: int, ref: int | None, op: str = "I", w: int = 1) -> dict:
    return {"tbl": "u", "uid": uid, "rid": uid, "ref": ref, "w": w, "op": op}


def test_routed_upserts_go_parents_first_and_deletes_children_first():
    model = routed_model()
    run(model, [u_row(1, 5), t_row(5), u_row(1, 5, w=2)])
    assert (1,) not in model.rows and model.u_rows[1]["ref"] == 5
    assert model.u_rows[1]["w"] == 3, "u's w adds"
    run(model, [t_row(5, "D"), u_row(1, None, "D")])
    assert model.rows == {} and model.u_rows == {}
    assert model.state["s1"].acks[1] == Ack(
        deleted=2, tables={"t": [0, 1, 0, 0], "u": [0, 1, 0, 0]}
    )


def test_routed_runs_keep_the_staged_order_between_them():
    model = routed_model()
    # the delete of t 5 is its own run, after u 1's upsert: RESTRICT refuses it
    run(model, [t_row(5), u_row(1, 5), t_row(5, "D"), u_row(2, 5)])
    assert (5,) in model.rows and set(model.u_rows) == {1, 2}
    assert model.state["s1"].acks[0] == Ack(
        rows=3, quarantined=1, tables={"t": [1, 0, 1, 0], "u": [2, 0, 0, 0]}
    )


def test_a_route_naming_no_table_is_set_aside_and_a_retry_routes_again():
    model = routed_model("overwrite")
    run(model, [u_row(1, 7), {**t_row(8), "tbl": "T"}, {**t_row(9), "tbl": None}])
    assert model.rows == {} and model.u_rows == {}
    assert model.state["s1"].acks[0] == Ack(
        quarantined=3, tables={"u": [0, 0, 1, 0], "": [0, 0, 2, 0]}
    )
    run(model, [t_row(7)])
    model.retry("s1")
    assert model.u_rows[1]["ref"] == 7, "its parent came: the child lands"
    assert len(model.open_entries("s1")) == 2, "strays are set aside again"


def test_a_keys_tombstone_is_the_tables_and_expires_with_its_newest_deleter():
    """One tombstone per key: its highest version and the sink that recorded it;
    a sink's purge expires only the tombstones it recorded last."""
    model = cdc_model(cdc_sink("s1"), cdc_sink("s2"))
    run(model, [delete(5, 3)], sink_id="s1")
    run(model, [delete(5, 2)], sink_id="s2")  # older: s1's stays
    assert {k: (s.version, s.sink_id) for k, s in model.tombstones.items()} == {
        (5,): (3, "s1")
    }
    model.expire_tombstones()
    model.purge("s2", before=0)
    assert list(model.tombstones) == [(5,)], "s2 recorded none of them last"
    model.purge("s1", before=0)
    assert model.tombstones == {}
    assert model.apply_record("s2", up(5, 1))[0] == APPLIED


def test_ignore_nulls_keeps_stored_values_and_a_new_key_takes_its_nulls():
    req = Column("req", "bigint", nullable=False, has_default=False)
    model = ReferenceModel(
        target(LABEL, N, req),
        [sink(["id", "label", "n", "req"], [("n", "add")], ignore_nulls=True)],
    )
    run(model, [{"id": 1, "label": "a", "n": 1, "req": 1}])
    run(model, [{"id": 1, "label": None, "n": None, "req": None}])
    assert model.rows[(1,)] == {"id": 1, "label": "a", "n": 1, "req": 1}
    assert model.effects[KEPT_NULL] == 3  # label, n and req
    run(model, [{"id": 2, "label": None, "n": None, "req": None}])
    assert (2,) not in model.rows, "a new key's NULL for NOT NULL is set aside"


def truncating(sink_id="s1", routed: Routed | None = None) -> Sink:
    return replace(cdc_sink(sink_id), cdc=Cdc(truncate_values=("T",)), routed=routed)


def truncate(v, key=None):
    return {"id": key, "n": None, "v": v, "op": "T"}


def test_a_truncate_deletes_rows_at_or_below_its_version_and_skips_older_upserts():
    """Rows at or below the truncate's version (or without one) go; upserts at or
    below T (or without a version) are stale; deletes and newer upserts are not."""
    model = cdc_model(truncating(), truncating("s2"))
    run(model, [up(1, 3), up(2, None), up(3, 8), up(6, 5)])
    run(model, [up(1, 4), truncate(5), truncate(4, key=3)])
    assert set(model.rows) == {(3,)}
    assert (model.truncated["t"].version, model.truncated["t"].sink_id) == (5, "s1")
    assert model.state["s1"].acks[1] == Ack(rows=1, deleted=2)
    run(model, [up(4, 5), up(4, None), up(5, 6), delete(3, 9)], sink_id="s2")
    assert set(model.rows) == {(5,)}, "T is the table's: s2's upserts meet it"
    assert model.state["s2"].acks[0] == Ack(rows=1, deleted=1, skipped=2)
    assert model.tombstones[(3,)].version == 9 and model.effects[TRUNCATED] == 1
    assert model.effects[TRUNCATE_STALE] == 2
    model.expire_tombstones()
    model.purge("s1", before=5)
    assert model.truncated["t"].version == 5, "purge leaves T"


def test_a_truncate_without_a_version_or_with_a_restrict_child_is_set_aside():
    model = cdc_model(truncating(), child="restrict")
    run(model, [up(1, 3), up(2, 9)])
    assert model.apply_record("s1", truncate(None)) == (
        QUARANTINED,
        frozenset({TRUNCATE}),
    )
    model.add_child((1,))
    assert model.apply_record("s1", truncate(5))[0] == QUARANTINED
    assert set(model.rows) == {(1,), (2,)} and model.truncated == {}
    model.add_child((2,))  # above the version: no matter
    run(model, [truncate(5)])
    assert model.open_entries("s1")[0].kinds == {CHILD}
    model.remove_children()
    model.retry("s1")
    assert set(model.rows) == {(2,)} and model.truncated["t"].version == 5


def test_routed_truncates_run_with_the_deletes_u_first():
    """``u`` (versioned) is truncated before ``t`` in a run of deletes, so that its
    rows referencing ``t``'s do not refuse ``t``'s truncate."""
    model = cdc_model(truncating(routed=Routed("overwrite", versioned=True)))
    u = {"tbl": "u", "uid": 1, "rid": 1, "ref": 5, "w": 1, "op": "I", "v": 2}
    run(
        model,
        [
            {**up(5, 1), "tbl": "t"},
            u,
            {**truncate(3), "tbl": "t"},
            {**truncate(2), "tbl": "u"},
        ],
    )
    assert model.rows == {} and model.u_rows == {}
    assert model.state["s1"].acks[0].tables == {
        "t": [1, 1, 0, 0],
        "u": [1, 1, 0, 0],
    }
    assert model.apply_record("s1", {**u, "v": 2})[0] == SKIPPED
    assert model.apply_record("s1", {**u, "uid": 2, "ref": None, "v": 3})[0] == (
        APPLIED
    )
    assert model.apply_record("s1", {**u, "op": "D", "v": 1})[0] == DELETED


def test_a_sink_that_does_not_truncate_is_refused_beside_one_that_does():
    model = cdc_model(truncating(), cdc_sink("s2"))
    assert "another sink truncates" in model.refusal("s2")
    assert model.refusal("s1") is None


def history(cdc=True, history_shape=True, **settings) -> ReferenceModel:
    """A history of ``id`` with ``n``, ``label`` and the version ``v``."""
    stream = ["id", "n", "label", "v", *(["seq"] if cdc else [])]
    return ReferenceModel(
        target(N, LABEL, V, SEQ, history=history_shape),
        [sink(stream, version="v", cdc=cdc, scd_type=2, **settings)],
    )


def event(key, v, n=1, label="a", op="U"):
    return {"id": key, "n": n, "label": label, "v": v, "seq": 0, "op": op}


def spans(model: ReferenceModel, key=1) -> list[tuple]:
    """The key's records as (start, end, n, label, v)."""
    return [
        (r[START_AT], r[END_AT], r["n"], r["label"], r["v"])
        for r in model.history.get((key,), [])
    ]


def test_a_history_is_its_events_sorted_by_version_whatever_their_order():
    """A late upsert splits the record it falls in; a delete ends the open record
    and a later upsert opens one; the same events in any order end the same."""
    events = [
        event(1, 1, n=1),
        event(1, 5, n=5),
        event(1, 7, op="D"),
        event(1, 9, n=9),
        event(1, 3, n=3),
    ]
    wanted = [
        (1, 3, 1, "a", 1),
        (3, 5, 3, "a", 3),
        (5, 7, 5, "a", 5),
        (9, None, 9, "a", 9),
    ]
    model = history()
    run(model, events)
    assert spans(model) == wanted
    assert model.effects[SPLIT] == 1, "the event at 3 came late"
    backwards = history()
    run(backwards, *[[e] for e in reversed(events)])
    assert spans(backwards) == wanted and backwards.event_count() == 5
    assert model.rows == {} and model.tombstones == {}, "no row per key, no tombstones"


def test_an_upsert_equal_in_every_tracked_column_updates_the_open_record_in_place():
    """Untracked columns (and the version) change in place; a late event that
    changes a tracked column splits the record and takes the earlier values."""
    model = history(untracked=("label",))
    run(model, [event(1, 1, label="a"), event(1, 5, label="b")])
    assert spans(model) == [(1, None, 1, "b", 5)]
    assert model.effects[IN_PLACE] == 1
    run(model, [event(1, 3, n=2, label="c")])
    assert spans(model) == [(1, 3, 1, "a", 1), (3, 5, 2, "c", 3), (5, None, 1, "b", 5)]
    listed = history(tracked=("label",))
    run(listed, [event(1, 1, n=1), event(1, 2, n=2)])
    assert spans(listed) == [(1, None, 2, "a", 2)]


def test_a_delete_wins_at_its_version_and_an_event_seen_again_is_skipped():
    model = history()
    run(model, [event(1, 5, n=5), event(1, 5, op="D"), event(1, 5, n=6)])
    assert model.state["s1"].acks[0] == Ack(deleted=1, skipped=2), "wherever"
    run(model, [event(1, 5, op="D"), event(1, 2, n=2), event(1, 2, n=3)])
    assert model.state["s1"].acks[1] == Ack(rows=1, deleted=0, skipped=2)
    assert spans(model) == [(2, 5, 2, "a", 2)] and model.event_count() == 2


def test_a_history_upsert_that_does_not_fit_is_set_aside_even_at_a_deletes_version():
    """Values are judged before the version: an upsert too long for ``label`` is
    set aside whether the delete at its version came before or in its batch."""
    model = history()
    long = event(1, 5, label="x" * 9)
    run(model, [long, event(1, 5, op="D")], [long])
    assert model.state["s1"].acks[0] == Ack(deleted=1, quarantined=1)
    assert model.state["s1"].acks[1] == Ack(quarantined=1)
    assert [e.kinds for e in model.state["s1"].entries] == [{RANGE}, {RANGE}]
    assert spans(model) == [] and model.event_count() == 1


def test_a_history_record_without_a_key_or_version_or_with_a_null_is_set_aside():
    model = history(ignore_nulls=True, cdc=False)
    up_ = {"id": 1, "n": 1, "label": "a", "v": None}
    assert model.apply_record("s1", up_) == (QUARANTINED, frozenset({NO_VERSION}))
    assert NULL_KEY in model.apply_record("s1", {**up_, "id": None, "v": 2})[1]
    model.target = replace(
        model.target, columns=(ID, replace(N, nullable=False), LABEL, V)
    )
    assert model.apply_record("s1", {**up_, "v": 2, "n": None})[1] == {NULL}
    run(model, [{**up_, "v": 2}, {**up_, "v": 3, "label": None}])
    assert spans(model) == [(2, None, 1, "a", 3)], "the NULL kept the open value"


def test_a_history_sink_is_refused_with_add_or_keep_or_on_a_table_of_one_row():
    assert "merge mode" in history(merge=[("n", "add")]).refusal("s1")
    assert "not a history" in history(history_shape=False).refusal("s1")
    assert history().refusal("s1") is None


def test_every_history_record_spells_its_key_as_the_first_event_by_version():
    """A late event that comes first by version gives every record its spelling
    (found by the fuzzer: the model kept the spelling that arrived first)."""
    k = Column("k", "varchar", nullable=False, collation="utf8mb4_general_ci")
    model = ReferenceModel(
        Target((k, N, LABEL, V, SEQ), ("k",), history=True),
        [sink(["k", "n", "label", "v", "seq"], version="v", cdc=True, key=("k",),
              scd_type=2)],
    )  # fmt: skip
    run(model, [{"k": "A", "n": 1, "v": 10, "seq": 0, "op": "U"}])
    run(model, [{"k": "a", "n": 2, "v": 3, "seq": 0, "op": "U"}])
    assert [(r["k"], r[START_AT]) for r in model.history[("a",)]] == [
        ("a", 3),
        ("a", 10),
    ]


# -- history_retention: a purge after time passed folds old events into floors -----


def aged_and_purged(model: ReferenceModel) -> None:
    model.age_events()
    model.purge("s1", 0)


def test_a_purge_folds_each_keys_old_events_into_a_floor_and_the_history_stays():
    """Key 1's events up to 5 become a floor with the record open at 5, key 2's
    (deleted at 2) one with none open; 7, applied after time passed, stays. A late
    6 above the floor splits the record open at it."""
    model = history(retention=True)
    run(
        model,
        [event(1, 1, label="a"), event(1, 3, label="b"), event(2, 1, label="z")],
        [event(1, 5, label="c"), event(2, 2, op="D")],
    )
    model.age_events()
    run(model, [event(1, 7, label="d")])
    before = model.history_rows()
    model.purge("s1", 0)
    assert model.history_rows() == before and model.effects[FOLDED] == 2
    assert model.event_count() == 3, "two floors and the event at 7"
    assert (model.floors[(1,)].version, model.floors[(1,)].values["label"]) == (5, "c")
    assert (model.floors[(2,)].version, model.floors[(2,)].values) == (2, None)
    model.purge("s1", 0)
    assert model.effects[FOLDED] == 2, "nothing old left"
    run(model, [event(1, 6, label="e")])
    assert spans(model) == [
        (1, 3, 1, "a", 1),
        (3, 5, 1, "b", 3),
        (5, 6, 1, "c", 5),
        (6, 7, 1, "e", 6),
        (7, None, 1, "d", 7),
    ]


def test_an_event_above_a_floor_splits_with_the_values_the_floor_kept():
    """n untracked: 3 updated the record in place, 6 again after the fold. A late 5
    splits it: before 5 the values as of the floor (n 2, v 3), not those 6 gave."""
    model = history(retention=True, untracked=("n",))
    run(model, [event(1, 1, n=1), event(1, 3, n=2)])
    aged_and_purged(model)
    run(model, [event(1, 6, n=3)])
    assert spans(model) == [(1, None, 3, "a", 6)]
    run(model, [event(1, 5, n=5, label="b")])
    assert spans(model) == [(1, 5, 2, "a", 3), (5, 6, 5, "b", 5), (6, None, 3, "a", 6)]


def test_events_at_or_below_a_floor_are_set_aside_and_an_upsert_deleted_skipped():
    """At the floor (3) and below it, upserts and a delete are set aside, again at a
    retry; an upsert its batch deletes the key at the version of is no event."""
    model = history(retention=True)
    run(model, [event(1, 1, n=1), event(1, 3, n=2)])
    aged_and_purged(model)
    run(model, [event(1, 3, n=7), event(1, 2, n=7), event(1, 1, op="D"), event(1, 4)])
    assert model.state["s1"].acks[1] == Ack(rows=1, quarantined=3)
    run(model, [event(1, 2, n=8), event(1, 2, op="D")])
    assert model.state["s1"].acks[2] == Ack(quarantined=1, skipped=1)
    run(
        model,
        [event(1, 1, n=9), event(1, 1, n=9), event(1, 5), event(1, 6), event(1, 1)],
    )
    assert model.state["s1"].acks[3] == Ack(rows=2, quarantined=2, skipped=1), (
        "one event with the first of its chunk, not with another chunk's"
    )
    assert [e.kinds for e in model.state["s1"].entries] == [{FLOOR}] * 6
    model.retry("s1")
    assert len(model.open_entries("s1")) == 6, "refused again one by one"
    assert spans(model) == [(1, 3, 1, "a", 1), (3, 4, 2, "a", 3), (4, None, 1, "a", 6)]
    assert model.event_count() == 4, "the floor and the events at 4, 5 and 6"


def test_an_upsert_counts_apart_from_a_delete_at_its_version_in_another_chunk():
    """Counts follow arrival chunk by chunk: an upsert whose chunk holds a delete at
    its version is skipped; one in an earlier chunk than the delete is applied."""
    model = history()
    run(
        model, [event(1, 3), event(2, 1), event(2, 2), event(2, 3), event(1, 3, op="D")]
    )
    assert model.state["s1"].acks[0] == Ack(rows=4, deleted=1)
    run(model, [event(3, 3), event(3, 3, op="D")])
    assert model.state["s1"].acks[1] == Ack(deleted=1, skipped=1)
