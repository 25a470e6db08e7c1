"""The fuzzer's grammar: a small space of target shapes, sink configs and records,
biased towards the properties that change what a write means (ON UPDATE columns,
AUTO_INCREMENT keys, collations, the server's timestamp defaults and time zone,
foreign keys, triggers, columns narrower than the stream's types, a second sink on
the same table, a second table in one stream, names spelt in another case).

Every feature has a name; ``FUZZ_EXCLUDE=name,name`` keeps it out of the examples,
so that a fuzz run can look past a finding it already made, and ``scenarios``'
``force`` draws an example with the features named (``make test``'s fixed run:
GROUPS).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from tests.reference_model import (
    CI,
    END_AT,
    START_AT,
    Cdc,
    Column,
    Routed,
    Sink,
    Target,
)

FEATURES = (
    "auto_increment",  # an AUTO_INCREMENT key the stream writes (0 included)
    "varchar_key",  # a VARCHAR key, case-insensitive or binary collation
    "surrogate",  # mysql.key is a UNIQUE key beside an AUTO_INCREMENT PRIMARY KEY
    "compound",  # a compound key (a INT, ts TIMESTAMP(6))
    "on_update",  # ON UPDATE CURRENT_TIMESTAMP on a key or keep column
    "updated_at",  # an ON UPDATE column the stream does not write
    "missing_column",  # the stream lacks a key, merge or CDC column the config names
    "missing_version",  # the stream lacks the configured version column
    "explicit_defaults_off",  # the server's explicit_defaults_for_timestamp OFF
    "ts_version",  # a TIMESTAMP(6) NOT NULL version column
    "version",  # a version column
    "cdc",  # [cdc] deletes and tombstones
    "fk_parent",  # a foreign key to a parent table, some parents missing
    "child",  # a child table referencing the key (RESTRICT or CASCADE)
    "unique_label",  # another unique index, on the label
    "unsigned",  # the add column is INT UNSIGNED (negative deltas)
    "add_null",  # NULL values into the add column
    "triggers",  # an AFTER INSERT audit trigger, a BEFORE UPDATE trigger
    "generated",  # a generated column
    "required",  # a NOT NULL column without default
    "float",  # a DOUBLE column (NaN, infinity)
    "limits",  # values at and past their type's limits
    "second_sink",  # another sink (its own WAL) on the same target
    "routed",  # the first sink routes rows to t and a table u referencing it
    "crash",  # faults at the commit and retry points, then a restart
    "crash_after_commit",  # of them, a failure right after the batch's COMMIT
    "replay",
    "purge",
    "retry",
    "quarantine_batch",
    "expiry",  # tombstones older than the retention, then a purge
    "narrow",  # columns narrower than the stream's type: DECIMAL(10,2) for the
    # stream's DECIMAL(10,4), FLOAT for DOUBLE, DATETIME/TIMESTAMP without fractions
    "narrow_key",  # a key column without the stream's fractions of a second
    "narrow_version",  # a version column without the stream's fractions
    "shared_tombstones",  # a routed sink's two tables name one tombstone table
    "case_names",  # the stream and the config spell columns in another case
    "datetime_now",  # DATETIME DEFAULT / ON UPDATE CURRENT_TIMESTAMP columns the
    # stream does not write, the server's time zone not UTC
    "ignore_nulls",  # mysql.ignore_null_updates: a NULL keeps the stored value
    "except_columns",  # the stream carries label, the config leaves it out of t
    "truncate",  # [cdc] truncate_values: records truncating their table (routed:
    # u versioned too), some with a NULL version
    "history",  # t is a history (stored_as_scd_type = 2), tracked columns listed or
    # not, batches of earlier records repeated
    "history_shape",  # a history sink on a table of one row per key
    "retention",  # a history's history_retention: its events grow old, a purge
    # folds them into floors, records at or below a floor are set aside
)
REFUSALS = frozenset(
    {"missing_column", "missing_version", "narrow_key", "narrow_version",
     "shared_tombstones", "history_shape"}
)  # fmt: skip
"""Features that make the model refuse a sink at start: exercised when that
refusal is checked, whether or not another sink applies data."""
STEPS = frozenset({"crash", "crash_after_commit", "replay", "purge", "retry",
                   "quarantine_batch", "expiry"})  # fmt: skip
"""Features that are operator steps: used when the machine runs them."""
GROUPS = (
    frozenset({"cdc", "version", "child", "unique_label", "triggers", "updated_at",
               "purge", "expiry"}),
    frozenset({"routed", "cdc", "version", "fk_parent", "add_null", "datetime_now",
               "retry", "ignore_nulls"}),
    frozenset({"varchar_key", "second_sink", "cdc", "version", "case_names",
               "replay", "crash", "child"}),
    frozenset({"compound", "ts_version", "version", "explicit_defaults_off",
               "narrow", "quarantine_batch", "second_sink"}),
    frozenset({"surrogate", "unsigned", "limits", "crash_after_commit",
               "second_sink"}),
    frozenset({"on_update", "generated", "unique_label", "second_sink",
               "quarantine_batch"}),
    frozenset({"auto_increment", "float", "narrow", "datetime_now", "updated_at",
               "quarantine_batch", "except_columns"}),
    frozenset({"compound", "narrow_key", "second_sink"}),
    frozenset({"version", "ts_version", "narrow_version", "second_sink", "narrow"}),
    frozenset({"routed", "cdc", "version", "shared_tombstones"}),
    frozenset({"version", "missing_version", "second_sink", "case_names", "limits"}),
    frozenset({"auto_increment", "required", "missing_column", "second_sink",
               "replay", "ignore_nulls"}),
    frozenset({"cdc", "version", "ts_version", "limits", "except_columns",
               "ignore_nulls"}),
    frozenset({"routed", "cdc", "version", "child", "truncate"}),
    frozenset({"cdc", "version", "child", "truncate", "second_sink"}),
    frozenset({"history", "cdc", "version", "ignore_nulls"}),
    frozenset({"history", "version", "ts_version", "limits", "narrow", "required"}),
    frozenset({"history", "version", "history_shape"}),
    frozenset({"history", "retention", "version"}),
)  # fmt: skip
"""The fixed run's examples, one per group of features forced (others drawn):
together every feature, each with data applied or (REFUSALS) its refusal
checked."""

HISTORY_OFF = frozenset(
    {"auto_increment", "surrogate", "compound", "on_update", "updated_at",
     "missing_column", "missing_version", "fk_parent", "child", "unique_label",
     "triggers", "generated", "second_sink", "routed", "narrow_key",
     "narrow_version", "shared_tombstones", "case_names", "datetime_now",
     "except_columns", "truncate"}
)  # fmt: skip
"""Features a history is not drawn with: columns MySQL fills or a trigger writes
as each record is replaced, keys another table references (a history's key is not
unique), merge modes and truncates (refused with type 2), other sinks."""

T1, T2, T3, T4 = (datetime(2001, 1, 1, 0, 0, s) for s in (1, 2, 3, 4))
T1_5 = datetime(2001, 1, 1, 0, 0, 1, 500000)
T2_25 = datetime(2001, 1, 1, 0, 0, 2, 250000)
"""Fractions of a second a column without them would drop."""
TS_EDGE = datetime(2038, 1, 19, 3, 14, 7)
TS_PAST = datetime(2040, 1, 1)
"""Past TIMESTAMP's range."""


def excluded() -> frozenset[str]:
    """Features ``FUZZ_EXCLUDE`` (comma-separated) keeps out; unknown names fail."""
    names = {n.strip() for n in os.environ.get("FUZZ_EXCLUDE", "").split(",")}
    names.discard("")
    unknown = names - set(FEATURES)
    if unknown:
        raise ValueError(f"FUZZ_EXCLUDE: unknown feature(s) {sorted(unknown)}")
    return frozenset(names)


@dataclass(frozen=True, repr=False)
class Scenario:
    """One example's target, sinks and what their records may hold."""

    target: Target
    sinks: tuple[Sink, ...]
    ddl: tuple[str, ...]
    """Statements creating the parent, target, child and audit tables, triggers."""
    parents: tuple[int, ...]
    """Rows of the parent table at the start."""
    missing_parents: tuple[int, ...]
    domains: tuple[tuple[str, tuple[Any, ...]], ...]
    """Values each column's records draw from (the key's included)."""
    explicit_defaults_off: bool
    features: frozenset[str]
    """The features this example uses."""
    time_zone: str | None = None
    """The server's time zone for the example (``SET GLOBAL time_zone``)."""
    now_columns: tuple[tuple[str, bool, bool, bool], ...] = ()
    """Columns of ``t`` MySQL fills with the time, not the stream: (name, on
    insert, on update, in the server's zone rather than UTC)."""

    def domain(self, column: str) -> tuple[Any, ...]:
        return dict(self.domains)[column]

    def __repr__(self) -> str:
        """Short: a reproducer shows the DDL and the configs (notes) instead."""
        return f"Scenario(features={sorted(self.features)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints it in a reproducer: as ``repr``."""
        printer.text(repr(self))


class _Draw:
    """Feature-aware draws: an excluded feature is never drawn, a forced one
    always (when its conditions hold)."""

    def __init__(self, draw: Any, off: frozenset[str], force: frozenset[str]) -> None:
        self.draw = draw
        self.off = off
        self.force = force
        self.used: set[str] = set()

    def feature(self, name: str, chance: float = 0.5) -> bool:
        if name in self.off:
            return False
        if name in self.force:
            self.used.add(name)
            return True
        # Shrinks towards 0: towards the feature left out.
        picked = self.draw(st.integers(0, 99)) >= 100 - round(100 * chance)
        if picked:
            self.used.add(name)
        return picked

    def choice(self, options: list[Any]) -> Any:
        return self.draw(st.sampled_from(options))


KEY_KINDS = {
    "bigint": None,
    "auto_increment": "auto_increment",
    "varchar_ci": "varchar_key",
    "varchar_bin": "varchar_key",
    "compound": "compound",
    "surrogate": "surrogate",
}


@st.composite
def scenarios(
    draw: Any, off: frozenset[str] = frozenset(), force: frozenset[str] = frozenset()
) -> Scenario:
    """A target shape with one or two sinks on it; the features in ``force`` are
    drawn whenever they can be (``features`` says which were)."""
    d = _Draw(draw, off, force)
    # In the fixed run only where forced: its other groups draw what they drew.
    history = (not force or "history" in force) and d.feature("history", 0.15)
    if history:
        d.off = off = off | HISTORY_OFF
    kinds = [k for k, f in KEY_KINDS.items() if f is None or f not in off]
    if history and force:
        # Known: a history's case-insensitive key takes the spelling of the
        # records' own events when they arrive late, so one key's records are
        # spelt apart, by arrival order; ``make fuzz`` still draws it.
        kinds.remove("varchar_ci")
    forced = [k for k in kinds if KEY_KINDS[k] in force]
    if "routed" in force or "shared_tombstones" in force:
        forced = ["bigint"]
    elif "child" in force:  # a child references a key of one column
        kinds.remove("compound")
    key_kind = d.choice(forced or kinds)
    if KEY_KINDS[key_kind]:
        d.used.add(KEY_KINDS[key_kind])
    collation = (
        "utf8mb4_bin" if key_kind == "varchar_bin" else d.choice([CI, "utf8mb4_bin"])
    )
    limits = d.feature("limits", 0.3)
    narrow = d.feature("narrow", 0.15)
    columns, domains, key = _key_columns(d, key_kind, collation, limits)
    unique: list[tuple[str, ...]] = [("sid",)] if key_kind == "surrogate" else []
    columns.append(Column("rid", "bigint"))
    domains["rid"] = ()
    n_kind = "bigint"
    if d.feature("unsigned", 0.3):
        n_kind = "uint"
    elif narrow and d.draw(st.booleans()):
        n_kind = "decimal"
    columns.append(Column("n", n_kind, scale=2))
    domains["n"] = _n_values(n_kind, d.feature("add_null", 0.4), limits)
    columns.append(Column("label", "varchar", collation=collation))
    domains["label"] = ("x", "X", "x ", "y", None) + (
        ("12345678", "123456789") if limits else ()
    )
    triggers = d.feature("triggers", 0.25)
    before_trigger = triggers and "unique_label" not in force and d.draw(st.booleans())
    if not before_trigger and d.feature("unique_label", 0.3):
        unique.append(("label",))
    if narrow or "on_update" in force or d.draw(st.booleans()):
        kind = (
            "timestamp" if "on_update" in force else d.choice(["datetime", "timestamp"])
        )
        on_update = kind == "timestamp" and d.feature("on_update", 0.4)
        columns.append(Column("created", kind, on_update=on_update))
        domains["created"] = (
            (None, T1, T2)
            + ((TS_EDGE, TS_PAST) if limits else ())
            + ((T1_5,) if narrow else ())
        )
    version_kind = None
    if d.feature("version", 0.65) or "narrow_version" in force or history:
        d.used.add("version")
        narrow_version = d.feature("narrow_version", 0.1)
        timestamp = d.feature("ts_version", 0.35)
        version_kind = "timestamp" if narrow_version or timestamp else "bigint"
        columns.append(
            Column(
                "v",
                version_kind,
                nullable=version_kind == "bigint",
                has_default=version_kind == "bigint",
                fsp=0 if narrow_version else 6,
            )
        )
        domains["v"] = (
            (None, 1, 2, 3, 5, 7, 10)
            if version_kind == "bigint"
            else (None, T1, T2, T3, T4)
            + ((TS_PAST,) if limits else ())
            + ((T1_5, T2_25) if narrow_version else ())
        )
    cdc = d.feature("cdc", 0.45)
    if cdc:
        columns.append(Column("seq", "bigint"))
        domains["seq"] = ()
    fk = d.feature("fk_parent", 0.35)
    if fk:
        columns.append(Column("parent_id", "bigint"))
        domains["parent_id"] = (None, 1, 2, 3, 4)
    if d.feature("float", 0.2):
        single = narrow and d.draw(st.booleans())
        columns.append(Column("score", "float" if single else "double"))
        domains["score"] = (0.5, None, float("nan"), float("inf")) + (
            (0.1, 1 / 3) if single else ()
        )
    if d.feature("required", 0.2):
        columns.append(Column("req", "int", nullable=False, has_default=False))
        domains["req"] = (1, 2, 2, None)
    if d.feature("generated", 0.15):
        columns.append(Column("g", "bigint", generated=True))
        domains["g"] = (1,)
    updated_at = d.feature("updated_at", 0.35)
    datetime_now = d.feature("datetime_now", 0.15)
    child = None
    if cdc and len(key) == 1 and d.feature("child", 0.35):
        child = d.choice(["restrict", "restrict", "cascade"])
    shape = history and (not force or "history_shape" in force)
    shape = shape and d.feature("history_shape", 0.1)
    target = Target(
        columns=tuple(columns),
        key=key,
        unique=tuple(unique),
        fk_column="parent_id" if fk else None,
        child=child,
        before_trigger_sets=("label",) if before_trigger else (),
        history=history and not shape,
    )
    routed = None
    shared = False
    if key_kind in ("bigint", "auto_increment") and d.feature("routed", 0.3):
        routed = Routed(w_policy=d.choice(["overwrite", "add"]))
        domains.update(uid=(1, 2, 3, None), ref=domains["id"], w=(1, 2, -1, None))
        shared = (  # refused at start: a forced truncate needs a sink that runs
            cdc
            and version_kind is not None
            and "truncate" not in force
            and d.feature("shared_tombstones", 0.2)
        )
    case = d.feature("case_names", 0.15)
    sinks = [
        _sink(d, target, "s1", cdc, version_kind, noisy=True, routed=routed, case=case)
    ]
    if shared:
        sinks[0] = replace(sinks[0], shared_tombstones=True)
    if history:
        sinks[0] = _historic(d, sinks[0])
        # in the fixed run only where forced: the other history groups draw what
        # they drew
        if (not force or "retention" in force) and d.feature("retention", 0.5):
            sinks[0] = replace(sinks[0], retention=True)
    if d.feature("second_sink", 0.3):
        guarded = cdc and version_kind is not None and d.draw(st.booleans())
        sinks.append(
            _sink(d, target, "s2", guarded, version_kind, noisy=False, case=case)
        )
    off_defaults = d.feature(
        "explicit_defaults_off", 0.6 if version_kind == "timestamp" else 0.15
    )
    now_columns = []
    if updated_at:
        now_columns.append(("updated_at", True, True, False))
    if datetime_now:
        now_columns += [("made", True, False, True), ("touched", False, True, True)]
    # Drawn last, and in the fixed run only where forced: its other groups draw the
    # examples they drew before.
    truncate = not force or "truncate" in force
    if truncate and cdc and version_kind and not shared and d.feature("truncate", 0.3):
        sinks[0] = _truncating(sinks[0])
        if sinks[1:] and sinks[1].guarded and d.draw(st.booleans()):
            sinks[1] = _truncating(sinks[1])
    routed = sinks[0].routed
    u_ddl = _u_ddl(target, shared, routed.versioned) if routed else []
    return Scenario(
        target=target,
        sinks=tuple(sinks),
        ddl=tuple(
            _ddl(target, key_kind, collation, now_columns, triggers, before_trigger)
            + u_ddl
        ),
        parents=(1, 2) if fk else (),
        missing_parents=(3, 4) if fk else (),
        domains=tuple(domains.items()),
        explicit_defaults_off=off_defaults,
        features=frozenset(d.used),
        time_zone="+02:00" if datetime_now else None,
        now_columns=tuple(now_columns),
    )


def _key_columns(
    d: _Draw, kind: str, collation: str, limits: bool
) -> tuple[list[Column], dict[str, tuple[Any, ...]], tuple[str, ...]]:
    null = (None,)
    if kind in ("bigint", "auto_increment"):
        auto = kind == "auto_increment"
        values = (0, 0, 1, 2) if auto else (0, 1, 2, 3)
        if limits and not auto:
            values += (2**63 - 1,)
        return (
            [Column("id", "bigint", nullable=False, auto_increment=auto)],
            {"id": values + null},
            ("id",),
        )
    if kind == "compound":
        on_update = d.feature("on_update", 0.6)
        narrow = d.feature("narrow_key", 0.25)
        ts = Column(
            "ts",
            "timestamp",
            nullable=False,
            has_default=on_update,
            on_update=on_update,
            fsp=0 if narrow else 6,
        )
        return (
            [Column("a", "int", nullable=False), ts],
            {"a": (1, 2), "ts": (T1, T1, T2) + ((T1_5,) if narrow else ()) + null},
            ("a", "ts"),
        )
    keys = ("a", "A", "a ", "b", "B ")
    return (
        [Column("k", "varchar", nullable=kind == "surrogate", collation=collation)],
        {"k": keys + null},
        ("k",),
    )


def _n_values(kind: str, nulls: bool, limits: bool) -> tuple[Any, ...]:
    if kind == "decimal":
        values: tuple[Any, ...] = tuple(
            Decimal(v) for v in ("1.5", "0.125", "-2.25", "1.0001")
        )
        if limits:
            values += (Decimal("999999.99"), Decimal("-999999.9999"))
        return values + ((None,) if nulls else ())
    if kind == "uint":
        values: tuple[Any, ...] = (0, 1, 3, -1, -3)
        if limits:
            values += (2**32 - 1, 2**32)
    else:
        values = (1, 2, -1, 5)
        if limits:
            values += (2**63 - 1, -(2**63))
    return values + ((None,) if nulls else ())


def _sink(
    d: _Draw,
    target: Target,
    sink_id: str,
    cdc: bool,
    version_kind: str | None,
    noisy: bool,
    routed: Routed | None = None,
    case: bool = False,
) -> Sink:
    """A sink on ``target``; ``noisy``: its config may name a column its stream
    lacks, or write a generated column; ``case``: its stream and config spell some
    columns in another case than the table."""
    names = [c.name for c in target.columns]
    merge = {"n": d.choice(["add", "add", "add", "overwrite", "keep"])}
    merge["label"] = d.choice(["overwrite", "overwrite", "keep"])
    if "created" in names:
        merge["created"] = d.choice(["keep", "keep", "overwrite"])
        if not noisy and "on_update" in d.force:  # the forced run's sink that runs
            merge["created"] = "overwrite"
    # With a narrow version column a second sink writes it as data, and runs.
    plain = not noisy and "narrow_version" in d.used
    # a forced missing_version needs the sink's config to name a version column
    named = cdc or (noisy and "missing_version" in d.force)
    version = (
        "v"
        if version_kind and not plain and (named or d.draw(st.integers(0, 99)) < 85)
        else None
    )
    stream = [
        c.name
        for c in target.columns
        if c.name not in ("sid", "g", "req") and (c.name != "seq" or cdc)
    ]
    if "req" in names and d.draw(st.integers(0, 3)):
        stream.append("req")
    if "g" in names and noisy and d.draw(st.booleans()):
        stream.append("g")
    if not cdc and "seq" in stream:
        stream.remove("seq")
    leave = "except_columns" not in d.force and d.draw(st.integers(0, 5)) == 0
    if "label" in stream and leave:
        stream.remove("label")
        merge.pop("label")
    excepted: tuple[str, ...] = ()
    # A forced unique label needs the label written (its conflicts are the point).
    unique = "unique_label" in d.force
    if "label" in stream and not unique and d.feature("except_columns", 0.15):
        merge.pop("label")  # the stream carries it, the table never takes it
        excepted = ("label",)
    if (
        noisy
        and version
        and "missing_column" not in d.force
        and d.feature("missing_version", 0.12)
    ):
        stream.remove(version)
    elif noisy and d.feature("missing_column", 0.12):
        named = [*target.key, *merge, *(["seq"] if cdc else [])]
        stream.remove(d.choice([c for c in named if c in stream]))
    conflicts = "refuse"
    if any(index != ("sid",) for index in target.unique):
        conflicts = d.choice(["quarantine", "quarantine", "refuse"])
        if not noisy and "unique_label" in d.force:
            conflicts = "quarantine"
    spelled: dict[str, str] = {}
    named: dict[str, str] = {}
    if case:
        for name in stream:
            if d.draw(st.booleans()):
                spelled[name] = name.upper()
            if d.draw(st.booleans()):
                named[name] = d.choice([name.upper(), name.capitalize()])
    return Sink(
        sink_id=sink_id,
        stream=tuple(stream) + (("op",) if cdc else ()),
        key=target.key,
        merge=tuple(sorted(merge.items())),
        version=version,
        cdc=Cdc() if cdc else None,
        unique_conflicts=conflicts,
        routed=routed,
        spelled=tuple(sorted(spelled.items())),
        named=tuple(sorted(named.items())),
        ignore_nulls=d.feature("ignore_nulls", 0.25),
        excepted=excepted,
    )


def _historic(d: _Draw, sink: Sink) -> Sink:
    """``sink`` keeping a history (overwrite only), its tracked columns all but
    those listed (``rid`` and ``seq``, which differ in every record, among them: so
    that an upsert can update in place), those listed, or every data column."""
    data = [c for c in sink.written if c not in (*sink.key, "v")]
    some = [c for c in data if c not in ("rid", "seq") and d.draw(st.booleans())]
    tracked, untracked = None, ()
    how = d.choice(["except", "listed", "except", "all"])
    if how == "listed":
        tracked = tuple(some)
    elif how == "except":
        untracked = tuple(c for c in data if c in ("rid", "seq") or c in some)
    return replace(
        sink, merge=(), version="v", scd_type=2, tracked=tracked, untracked=untracked
    )


def _truncating(sink: Sink) -> Sink:
    """``sink`` (guarded) with ``[cdc] truncate_values = ["T"]``; routed, its ``u``
    versioned too (every table of the sink needs a version column)."""
    routed = sink.routed and replace(sink.routed, versioned=True)
    return replace(sink, cdc=replace(sink.cdc, truncate_values=("T",)), routed=routed)


def _u_ddl(target: Target, shared: bool, versioned: bool) -> list[str]:
    """A routed sink's second table: its rows reference t's (RESTRICT on delete).
    ``shared``: versioned like t, keyed like t, and keeping its tombstones in t's
    tombstone table (refused at start); ``versioned``: with ``v`` of t's type,
    NULL allowed."""
    if not shared:
        v = ""
        if versioned:
            v = _column_ddl(replace(target.column("v"), nullable=True, fsp=6)) + ", "
        return [
            "CREATE TABLE u (uid BIGINT PRIMARY KEY, rid BIGINT, ref BIGINT NULL, "
            f"w BIGINT, {v}FOREIGN KEY (ref) REFERENCES t (id)) ENGINE=InnoDB"
        ]
    v = _column_ddl(target.column("v"))
    return [
        "CREATE TABLE u (id BIGINT PRIMARY KEY, uid BIGINT, rid BIGINT, "
        f"ref BIGINT NULL, w BIGINT, {v}, FOREIGN KEY (ref) REFERENCES t (id)) "
        "ENGINE=InnoDB"
    ]


def _column_ddl(c: Column) -> str:
    fsp = f"({c.fsp})" if c.fsp else ""
    kinds = {
        "bigint": "BIGINT",
        "int": "INT",
        "uint": "INT UNSIGNED",
        "varchar": f"VARCHAR({c.length}) COLLATE {c.collation}",
        "datetime": f"DATETIME{fsp}",
        "double": "DOUBLE",
        "float": "FLOAT",
        "decimal": f"DECIMAL(10,{c.scale})",
    }
    if c.kind == "timestamp":
        sql = f"TIMESTAMP{fsp}"
        if c.on_update:
            return (
                f"`{c.name}` {sql} {'NOT NULL' if not c.nullable else 'NULL'} "
                f"DEFAULT CURRENT_TIMESTAMP{fsp} ON UPDATE CURRENT_TIMESTAMP{fsp}"
            )
        if c.nullable:
            return f"`{c.name}` {sql} NULL DEFAULT NULL"
        return f"`{c.name}` {sql} NOT NULL"
    if c.generated:
        return f"`{c.name}` BIGINT AS (rid + 1) VIRTUAL"
    sql = f"`{c.name}` {kinds[c.kind]}"
    if not c.nullable:
        sql += " NOT NULL"
    if c.auto_increment:
        sql += " AUTO_INCREMENT"
    return sql


NOW_DDL = {
    "updated_at": "updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP "
    "ON UPDATE CURRENT_TIMESTAMP",
    "made": "made DATETIME DEFAULT CURRENT_TIMESTAMP",
    "touched": "touched DATETIME(6) NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP(6)",
}


def _ddl(
    target: Target,
    key_kind: str,
    collation: str,
    now_columns: list[tuple[str, bool, bool, bool]],
    triggers: bool,
    before_trigger: bool,
) -> list[str]:
    statements = []
    if target.fk_column:
        statements += [
            "CREATE TABLE parent (id BIGINT PRIMARY KEY) ENGINE=InnoDB",
            "INSERT INTO parent VALUES (1), (2)",
        ]
    lines = []
    if key_kind == "surrogate":
        lines.append("sid BIGINT AUTO_INCREMENT PRIMARY KEY")
    lines += [_column_ddl(c) for c in target.columns]
    lines += [NOW_DDL[name] for name, *_ in now_columns]
    keys = ", ".join(target.key)
    if target.history:
        kind = _column_ddl(replace(target.column("v"), nullable=True)).split(" ")[1]
        lines += [f"{START_AT} {kind} NOT NULL", f"{END_AT} {kind} NULL DEFAULT NULL"]
        keys += f", {START_AT}"
    if key_kind == "surrogate":
        lines.append(f"UNIQUE KEY uk ({keys})")
    else:
        lines.append(f"PRIMARY KEY ({keys})")
    if ("label",) in target.unique:
        lines.append("UNIQUE KEY ul (label)")
    if target.fk_column:
        lines.append("FOREIGN KEY (parent_id) REFERENCES parent (id)")
    statements.append(
        "CREATE TABLE t (\n  "
        + ",\n  ".join(lines)
        + f"\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}"
    )
    if target.child:
        ref = _column_ddl(target.column(target.key[0])).split(" ", 1)[1]
        ref = ref.replace(" AUTO_INCREMENT", "").replace(" NOT NULL", "")
        statements.append(
            "CREATE TABLE child (id INT AUTO_INCREMENT PRIMARY KEY, "
            f"ref {ref} NOT NULL, FOREIGN KEY (ref) REFERENCES t ({target.key[0]}) "
            f"ON DELETE {target.child.upper()}) ENGINE=InnoDB "
            f"DEFAULT CHARSET=utf8mb4 COLLATE={collation}"
        )
    if triggers:
        statements += [
            "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, "
            "what VARCHAR(64)) ENGINE=InnoDB",
            "CREATE TRIGGER t_audit AFTER INSERT ON t FOR EACH ROW "
            f"INSERT INTO audit (what) VALUES (CONCAT_WS(',', NEW.{target.key[0]}))",
        ]
    if before_trigger:
        statements.append(
            "CREATE TRIGGER t_label BEFORE UPDATE ON t FOR EACH ROW "
            "SET NEW.label = UPPER(NEW.label)"
        )
    return statements


def records(scenario: Scenario, sink: Sink) -> st.SearchStrategy[list[dict]]:
    """A batch's records for ``sink``, in apply order, without ``rid`` and ``seq``
    (the machine numbers them). CDC deletes carry their key and version only."""
    written = [c for c in sink.written if c not in ("rid", "seq")]
    fields = {c: st.sampled_from(scenario.domain(c)) for c in written}
    if sink.scd_type == 2:  # few keys, many events each: late ones split records
        fields.update({k: st.sampled_from(scenario.domain(k)[:2]) for k in sink.key})
        fields[sink.version] = st.sampled_from(scenario.domain(sink.version)[::-1])
    if sink.cdc:
        ops = ("I", "U", "U", "D", "D") + sink.cdc.truncate_values
        fields["op"] = st.sampled_from(ops)
    keep = set(sink.key) | ({sink.version} if sink.version else set())

    def shaped(record: dict) -> dict:
        """A delete carries its key and version alone; a truncate its version and
        the key as drawn (ignored, NULL or not)."""
        if sink.cdc and record["op"] in sink.cdc.delete_values + (
            sink.cdc.truncate_values
        ):
            return {
                c: (v if c in keep or c == "op" else None) for c, v in record.items()
            }
        return record

    record = st.fixed_dictionaries(fields).map(shaped)
    if sink.cdc and sink.cdc.truncate_values:  # a quarter of truncates lack a version
        record = st.tuples(record, st.integers(0, 3)).map(
            lambda drawn: (
                {**drawn[0], sink.version: None}
                if drawn[0]["op"] in sink.cdc.truncate_values and not drawn[1]
                else drawn[0]
            )
        )
    data = sorted(set(written) - set(sink.key) - {sink.version})
    if sink.ignore_nulls and data:  # half the records partial: NULLs for some
        partial = st.tuples(record, st.sets(st.sampled_from(data), min_size=1)).map(
            lambda drawn: {**drawn[0], **dict.fromkeys(drawn[1])}
        )
        record = st.one_of(record, partial)
    if sink.routed is not None:
        keep |= {"uid"}
        u_columns = ("uid", "ref", "w", *(("v",) if sink.routed.versioned else ()))
        u_fields = {c: st.sampled_from(scenario.domain(c)) for c in u_columns}
        if sink.cdc:
            u_fields["op"] = fields["op"]
        route = Routed.ROUTE
        record = st.one_of(
            record.map(lambda r: {**r, route: "t"}),
            st.fixed_dictionaries(u_fields)
            .map(shaped)
            .map(lambda r: {**r, route: "u"}),
            st.fixed_dictionaries(
                fields, optional={route: st.sampled_from(["T", None])}
            ),
        )
    return st.lists(record, min_size=1, max_size=8 if sink.scd_type == 2 else 5)


def config_dict(sink: Sink, url: str, wal_path: str) -> dict[str, Any]:
    """The sink's config, as its TOML file would hold it (columns named as
    ``sink.named`` spells them)."""
    name = dict(sink.named).get
    mysql: dict[str, Any] = {
        "url": url,
        "table": "t",
        "key": [name(k, k) for k in sink.key],
        "merge": {name(c, c): p for c, p in sink.merge},
        "unique_conflicts": sink.unique_conflicts,
        "ignore_null_updates": sink.ignore_nulls,
        "except_columns": [name(c, c) for c in sink.excepted],
        "retry_backoff": 0.02,
        "retry_backoff_max": 0.1,
        "outage_budget": 30,
    }
    if sink.version:
        mysql["version_column"] = name(sink.version, sink.version)
    if sink.scd_type == 2:
        mysql["stored_as_scd_type"] = 2
        if sink.tracked is not None:
            mysql["track_history_column_list"] = list(sink.tracked)
        if sink.untracked:
            mysql["track_history_except_column_list"] = list(sink.untracked)
        if sink.retention:
            mysql["history_retention"] = RETENTION
    if sink.routed is not None:
        del mysql["table"]
        moved = (
            "key",
            "merge",
            "unique_conflicts",
            "ignore_null_updates",
            "except_columns",
        )
        t = {k: mysql.pop(k) for k in moved}
        if sink.version:
            t["version_column"] = mysql.pop("version_column")
        u: dict[str, Any] = {"key": ["uid"], "merge": {"w": sink.routed.w_policy}}
        if sink.routed.versioned:
            u["version_column"] = "v"
        if sink.shared_tombstones:
            u.update(key=["id"], version_column="v", tombstone_table=TOMBSTONES)
            t["tombstone_table"] = TOMBSTONES
        mysql.update(route_column=Routed.ROUTE, tables={"t": t, "u": u})
    raw: dict[str, Any] = {
        "sink": {"id": sink.sink_id},
        "wal": {"path": wal_path, "chunk_rows": 4},
        "mysql": mysql,
    }
    if sink.cdc:
        raw["cdc"] = {
            "op_column": sink.cdc.op_column,
            "order_by": sink.cdc.order_by,
            "delete_values": list(sink.cdc.delete_values),
        }
        if sink.cdc.truncate_values:
            raw["cdc"]["truncate_values"] = list(sink.cdc.truncate_values)
    return raw


TOMBSTONES = "t_tombstones"
EVENTS = "t_events"
"""The history's events table."""
RETENTION = "1 hour"
"""A history's ``history_retention``: the machine ages its events past it."""


def toml(raw: dict[str, Any]) -> str:
    """``raw`` (sections of scalars, lists and flat tables) as TOML text."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return str(v)

    return "\n".join(
        f"[{name}]\n" + "\n".join(f"{k} = {value(v)}" for k, v in section.items())
        for name, section in raw.items()
    )
