"""A plain-Python reference model of the sink's merge semantics (docs/merge.md, its
"Per record" to "The target's shape"): what every target row must end
as, given the target's shape, the sinks' configs, their staged batches and the
operators' steps. No MySQL, no Spark, no code of ``wal_sink``: it is written from
the words, so that the real sink can be held to it (tests/integration/
test_model_fuzz.py).

The model's rules, in the order a record meets them (``ReferenceModel._upsert`` and
``_delete``):

- a NULL key column: set aside (quarantined);
- with ``[cdc]`` and a version column: a version the column cannot hold is set aside;
  an upsert whose version is <= the key's tombstone (or NULL while one exists) is
  skipped — tombstones belong to the table, whichever sink left them — before any
  other value is judged (stale history is not bad data, docs/merge.md);
- NaN or infinity in a float, a value that does not fit its column (too long, out
  of range, NULL into NOT NULL) or that the column would change (a column narrower
  than the stream's type: more decimals than its scale, a fraction of a second it
  drops, a DOUBLE a FLOAT does not hold): set aside; an ``add`` into an existing row
  checks the sum's range instead of the value's (the value must still land as
  sent);
- the merge: key columns never change (the first text inserted stays);
  ``overwrite`` takes the new value, with a version column only when the stored
  version is NULL or the record's is non-NULL and >= it (the version column alike);
  ``add``: NULL changes nothing, else stored NULL becomes the value, else the sum;
  ``keep`` never changes; with ``ignore_null_updates`` a NULL keeps an
  ``overwrite`` column's stored value (no fault for a NOT NULL column then);
- a written foreign key whose parent is missing, a unique value another key's row
  holds (``unique_conflicts = "quarantine"``), a delete a RESTRICT child refuses:
  set aside, nothing of the record applied (a refused delete leaves no tombstone).

A record whose op is one of ``[cdc] truncate_values`` truncates its table
(``_truncate``), its key and other columns ignored: with a NULL version it is set
aside; else every row whose version is <= its version or NULL is deleted (all or,
when a RESTRICT child row references one of them, none: set aside), and the table's
truncate tombstone T becomes the highest such version, with the sink that recorded
it. An upsert whose version is <= T (or NULL while T exists) is skipped as stale,
where a key's tombstone would skip it; deletes are not affected. T is the table's
(a sink on the target that does not truncate is refused) and never expires; it
counts as a delete.

A routed sink (``Sink.routed``: ``[mysql] route_column``, docs/merge.md "One stream,
several tables") writes ``t`` and a second table ``u`` (``Routed``) whose ``ref``
references ``t``'s key: each record goes to the table its route names (set aside when
it names none); a batch is cut into runs of consecutive upserts and of deletes (a
truncate runs with the deletes), and within a run ``t``'s records go first for
upserts and ``u``'s first for deletes, each table's in staged order; a delete of a
``t`` row that ``u`` rows reference is refused (RESTRICT), as is a ``u`` row whose
new ``ref`` has no ``t`` row. A retry routes each batch's entries again the same
way. With truncate_values ``u`` is versioned too (``Routed.versioned``).

A history sink (``Sink.scd_type`` 2, docs/merge.md "History (SCD type 2)") keeps
every event it applied (``events``: by collated key, by version, an upsert's values
or DELETE) and its target's rows are the records of each key's events sorted by
version (``_records``): an upsert ends the open record at its version and opens one,
unless every tracked column equals the open record's (then the open record takes its
values in place); a ``[cdc]`` delete ends the open record; with
``ignore_null_updates`` a NULL keeps the open record's value. A record without a key
or a version is set aside; an upsert's values are judged first, as for any row (a
NULL for a NOT NULL column set aside under ``ignore_null_updates`` too), whatever
the version; then an upsert at a version its key has an event at (an upsert seen
again, or a delete there, or one its chunk holds) is skipped; a delete replaces an
upsert at its version (a delete seen again is skipped). A history keeps no
tombstones.

With ``history_retention`` (``Sink.retention``, docs/merge.md "Events retention") a
purge after time passed (``age_events``: every event applied so far is old) folds
each key's events up to its newest old one F into its floor (``Floor``): the record
open at F with its values as of F, or none; the records before that one stay as
they are. The key's records are then the floor's record, from its start, and the
events above F; a record at or below F is set aside (FLOOR; an upsert its chunk
deletes the key at the version of is no event, and skipped, first; the chunk's
others at that key and version are one event with it, skipped).

Which sinks are refused at start (``refusal``) is decided from the shape and the
configs alone: among them a key or version column narrower than the stream's type,
two tables of one sink keeping their tombstones in one table, and a sink without
truncate_values on a target another sink truncates (it would not honour T), a
history sink with another merge mode than overwrite (a config error) or on a table
that is not a history (``Target.history``).

Each record set aside carries the kinds of reason it may be set aside for (REASONS:
a record with two faults may be set aside for either). Tombstones are the table's:
one per key, holding the highest version deleted and the sink that recorded it; a
sink's purge expires only those it recorded. ``take_stamped`` says which rows MySQL
inserted or changed since it was last asked (``ON UPDATE`` and ``DEFAULT
CURRENT_TIMESTAMP`` columns take the time then): ``updated`` the keys whose row an
upsert changed, ``inserted`` those inserted (an AFTER INSERT trigger fires, an
AUTO_INCREMENT column takes a new value);
``audit`` is what the target's AFTER INSERT trigger wrote.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class ModeRule:
    """A merge mode's rule in the model (docs/merge.md, "Per record"), one per
    mode ``wal_sink`` has (merge/modes.py; tests/unit/test_reference_model.py holds
    the names equal)."""

    merged: Any
    """(stored, value, newer) -> the column's value after the upsert."""
    sums: bool = False
    """The result comes from the stored value: its range is judged, not the
    record's value (which must still land as sent)."""
    never_changes: bool = False
    """A column MySQL changes by itself (ON UPDATE) is refused."""
    keeps_nulls: bool = False
    """A NULL keeps the stored value: it is no fault for a NOT NULL column when
    the key has a row (a new key takes the NULL)."""
    unless_null: ModeRule | None = None
    """The rule under ``ignore_null_updates`` (None: this one)."""


UNLESS_NULL = ModeRule(
    lambda stored, value, newer: value if newer and value is not None else stored,
    keeps_nulls=True,
)
ADD = ModeRule(
    lambda stored, value, newer: (
        stored if value is None else value if stored is None else stored + value
    ),
    sums=True,
)
KEEP = ModeRule(lambda stored, value, newer: stored, never_changes=True)
MODE_RULES = {
    "overwrite": ModeRule(
        lambda stored, value, newer: value if newer else stored,
        unless_null=UNLESS_NULL,
    ),
    # their NULLs keep the stored value already; ignore_null_updates lets a NOT
    # NULL column's NULL through to it too
    "add": replace(ADD, unless_null=replace(ADD, keeps_nulls=True)),
    "keep": replace(KEEP, unless_null=replace(KEEP, keeps_nulls=True)),
}


APPLIED = "applied"
DELETED = "deleted"
QUARANTINED = "quarantined"
SKIPPED = "skipped"

TS_MIN = datetime(1970, 1, 1, 0, 0, 1)
TS_MAX = datetime(2038, 1, 19, 3, 14, 7, 999999)
RANGES = {
    "bigint": (-(2**63), 2**63 - 1),
    "int": (-(2**31), 2**31 - 1),
    "uint": (0, 2**32 - 1),
}
CI = "utf8mb4_general_ci"
CHUNK_ROWS = 4
"""``wal.chunk_rows`` of the sinks modelled (the fuzzer's configs): the records a
history applies together (docs/merge.md: counts follow arrival, chunk by chunk)."""
STREAM_FSP = 6
"""The stream's timestamps are microseconds."""
STREAM_SCALE = 4
"""A decimal column's stream type is DECIMAL(10, 4)."""
DECIMAL_DIGITS = 10

# Why a record is set aside (the kinds its reason may be of).
NULL_KEY = "null key"
NOT_FINITE = "not finite"
NULL = "null"  # NULL into NOT NULL (or a TIMESTAMP NOT NULL MySQL would fill)
RANGE = "range"  # out of range, too long
NARROW = "narrow"  # the column would change the value
PARENT = "parent"  # no parent row (1452)
CHILD = "child"  # a child row refuses the delete (1451)
UNIQUE = "unique"  # another unique index holds the value
ROUTE = "route"  # the route names no table
VERSION = "version"  # a key or version the tombstones cannot hold
WHOLE = "whole"  # quarantine-batch
TRUNCATE = "truncate"  # a truncate without a version
KEPT_NULL = "kept null"  # an effect: a NULL kept a stored value (ignore_nulls)
TRUNCATED = "truncated"  # an effect: a truncate deleted rows
TRUNCATE_STALE = "truncate stale"  # an effect: an upsert at or below T skipped
NO_VERSION = "no version"  # a history record without a version
FLOOR = "floor"  # a history record at or below its key's floor (history_retention)
SPLIT = "split"  # an effect: a late upsert split a record of a history
IN_PLACE = "in place"  # an effect: an upsert changed an untracked column in place
FOLDED = "folded"  # an effect: a purge folded a key's old events into its floor
REASONS = (NULL_KEY, NOT_FINITE, NULL, RANGE, NARROW, PARENT, CHILD, UNIQUE, ROUTE,
           VERSION, WHOLE, TRUNCATE, NO_VERSION, FLOOR)  # fmt: skip
START_AT, END_AT = "__START_AT", "__END_AT"
"""A history record's span: [__START_AT, __END_AT), __END_AT NULL while open."""
DELETE = "delete"
"""A history's event of a delete (an upsert's is its values)."""


@dataclass(frozen=True)
class Column:
    """One column of the target, as far as a write's meaning depends on it."""

    name: str
    kind: str
    """bigint, int, uint, varchar, timestamp, datetime, double, float (a FLOAT the
    stream writes DOUBLEs into) or decimal (DECIMAL(10, scale), the stream's
    DECIMAL(10, 4))."""
    nullable: bool = True
    has_default: bool = True
    """False: NOT NULL without a default (an insert must write it)."""
    length: int = 8
    collation: str = CI
    on_update: bool = False
    """ON UPDATE CURRENT_TIMESTAMP."""
    generated: bool = False
    auto_increment: bool = False
    fsp: int = 0
    """Digits of a second a timestamp or datetime column keeps."""
    scale: int = STREAM_SCALE
    """A decimal column's."""

    def fits(self, value: Any) -> bool:
        """Whether a non-NULL ``value`` can be stored in this column."""
        if self.kind in RANGES:
            low, high = RANGES[self.kind]
            return low <= value <= high
        if self.kind == "varchar":
            return len(value) <= self.length
        if self.kind == "timestamp":
            return TS_MIN <= value <= TS_MAX
        if self.kind in ("double", "float"):
            return math.isfinite(value)
        if self.kind == "decimal":
            return abs(value) < Decimal(10) ** (DECIMAL_DIGITS - self.scale)
        return True

    @property
    def narrows(self) -> bool:
        """The column cannot hold every value of the stream's type as sent."""
        if self.kind in ("timestamp", "datetime"):
            return self.fsp < STREAM_FSP
        return self.kind == "float" or (
            self.kind == "decimal" and self.scale < STREAM_SCALE
        )

    def lands(self, value: Any) -> bool:
        """Whether a non-NULL ``value`` that fits is stored as sent."""
        if self.kind in ("timestamp", "datetime"):
            return value.microsecond % 10 ** (STREAM_FSP - self.fsp) == 0
        if self.kind == "decimal":
            return value == round(value, self.scale)
        if self.kind == "float" and math.isfinite(value):
            return _single(value) == value
        return True

    def collate(self, value: Any) -> Any:
        """The value as the column compares it: pad-space text, case-insensitive
        under a ``_ci`` collation."""
        if self.kind != "varchar" or value is None:
            return value
        text = value.casefold() if self.collation.endswith("_ci") else value
        return text.rstrip(" ")


def _single(value: float) -> float:
    """The double a FLOAT column stores ``value`` as, read as its shortest text."""
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return float(text)
    return single


@dataclass(frozen=True)
class Target:
    """The target table's shape."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]
    """``mysql.key``: the PRIMARY KEY or a UNIQUE key."""
    unique: tuple[tuple[str, ...], ...] = ()
    """Other unique indexes (a surrogate AUTO_INCREMENT PRIMARY KEY included)."""
    fk_column: str | None = None
    """References parent(id)."""
    child: str | None = None
    """A child table references the key: "restrict" or "cascade" on delete."""
    before_trigger_sets: tuple[str, ...] = ()
    """Columns a BEFORE INSERT/UPDATE trigger assigns (``SET NEW.col = …``)."""
    history: bool = False
    """A history table: ``__START_AT`` and ``__END_AT`` of the version column's
    type, the primary key (key…, ``__START_AT``)."""

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


@dataclass(frozen=True)
class Cdc:
    op_column: str = "op"
    order_by: str = "seq"
    delete_values: tuple[str, ...] = ("D",)
    truncate_values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Routed:
    """The second table of a routed sink: ``u (uid BIGINT PRIMARY KEY, rid BIGINT,
    ref BIGINT REFERENCES t (key), w BIGINT)``, routed by ``tbl`` = "t" or "u"."""

    w_policy: str = "overwrite"
    """``w``'s merge policy: overwrite or add."""
    versioned: bool = False
    """``u`` has ``v`` too (t's type, NULL allowed) as its version column: a sink
    with truncate_values needs one on every table."""

    ROUTE = "tbl"
    COLUMNS = ("uid", "rid", "ref", "w")

    @property
    def columns(self) -> tuple[str, ...]:
        """``u``'s columns."""
        return self.COLUMNS + (("v",) if self.versioned else ())


@dataclass(frozen=True)
class Sink:
    """One sink's config and the columns its stream carries."""

    sink_id: str
    stream: tuple[str, ...]
    """The stream's columns (the CDC op column included)."""
    key: tuple[str, ...]
    merge: tuple[tuple[str, str], ...] = ()
    version: str | None = None
    cdc: Cdc | None = None
    unique_conflicts: str = "refuse"
    routed: Routed | None = None
    """Routed to ``t`` and ``u``: ``stream`` and the settings above are ``t``'s."""
    shared_tombstones: bool = False
    """Routed, with ``u`` versioned too and both tables' ``tombstone_table`` one
    name: refused at start."""
    spelled: tuple[tuple[str, str], ...] = ()
    """Columns the stream spells otherwise than the table: (table's, stream's)."""
    named: tuple[tuple[str, str], ...] = ()
    """Columns the config spells otherwise than the table: (table's, config's).
    MySQL's column names are case-insensitive, and so are the sink's."""
    ignore_nulls: bool = False
    """``ignore_null_updates`` (``t``'s): a NULL in an upsert keeps the stored
    value of an overwrite column."""
    excepted: tuple[str, ...] = ()
    """``except_columns`` (``t``'s): stream columns ``t`` never takes."""
    scd_type: int = 1
    """``stored_as_scd_type``: 2 keeps a history of every key."""
    tracked: tuple[str, ...] | None = None
    """``track_history_column_list`` (None: every data column)."""
    untracked: tuple[str, ...] = ()
    """``track_history_except_column_list``."""
    retention: bool = False
    """``history_retention`` (a history's): a purge folds the events older than it."""

    def rule(self, column: str) -> ModeRule:
        """The column's merge rule; with ``ignore_nulls`` a NULL keeps the stored
        value of a column that is neither key nor version."""
        rule = MODE_RULES[dict(self.merge).get(column, "overwrite")]
        data = column not in self.key and column != self.version
        if self.ignore_nulls and data and rule.unless_null is not None:
            return rule.unless_null
        return rule

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column of the stream: ``t``'s, then (routed) the route and ``u``'s."""
        if self.routed is None:
            return self.stream
        extra = (Routed.ROUTE, *Routed.COLUMNS)
        return self.stream + tuple(c for c in extra if c not in self.stream)

    @property
    def written(self) -> tuple[str, ...]:
        """The stream's columns that reach the target (not the op column, none of
        ``excepted``)."""
        op = self.cdc.op_column if self.cdc else None
        return tuple(c for c in self.stream if c != op and c not in self.excepted)

    @property
    def guarded(self) -> bool:
        """[cdc] and a version column: deletes leave tombstones (a history's
        need none)."""
        return self.cdc is not None and self.version is not None

    def tracks(self, column: str) -> bool:
        """Whether a history opens a record when ``column`` changes: a data
        column (never a key or the version column) the lists track."""
        if column in self.key or column == self.version:
            return False
        if self.tracked is not None and column not in self.tracked:
            return False
        return column not in self.untracked


@dataclass
class Ack:
    rows: int = 0
    deleted: int = 0
    quarantined: int = 0
    skipped: int = 0
    state: str = "applied"
    tables: dict[str, list[int]] = field(default_factory=dict)
    """A routed sink's counts per table (``""``: routes naming none): rows,
    deleted, quarantined, skipped."""

    def count(self, table: str | None, outcome: str) -> None:
        """One record's outcome, in the batch's and (routed) its table's counts."""
        at = {APPLIED: 0, DELETED: 1, QUARANTINED: 2, SKIPPED: 3}[outcome]
        if outcome == QUARANTINED:
            self.quarantined += 1
        elif outcome == SKIPPED:
            self.skipped += 1
        elif outcome == DELETED:
            self.deleted += 1
        else:
            self.rows += 1
        if table is not None:
            self.tables.setdefault(table, [0, 0, 0, 0])[at] += 1


@dataclass
class Entry:
    """A record set aside, in one sink's quarantine."""

    batch_id: int
    record: dict[str, Any]
    position: int = 0
    """Its place in the batch as staged (a routed retry routes in staged order)."""
    is_open: bool = True
    superseded: bool = False
    """Its batch was applied again (replay --force): never retried."""
    kinds: frozenset[str] = frozenset()
    """What its reason may say (REASONS)."""

    @property
    def retriable(self) -> bool:
        return self.is_open and not self.superseded


@dataclass
class Tombstone:
    version: Any
    sink_id: str
    """The sink that recorded the key's newest delete: its purge expires it."""
    expired: bool = False
    """Older than the retention (time passed since it was last raised)."""


@dataclass(frozen=True)
class Floor:
    """A key's events up to ``version`` (F), folded by a purge (history_retention)."""

    version: Any
    values: dict[str, Any] | None
    """The data values of the record open at F, as of F; None: none was open."""
    start: Any
    """That record's ``__START_AT`` (F when none was open)."""
    spelling: dict[str, Any]
    """The key as its first event spelt it."""
    kept: tuple[dict[str, Any], ...]
    """The records before that one (all of F's, none open), as the fold found them."""


@dataclass
class SinkState:
    batches: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Staged batches still in the WAL."""
    next_batch: int = 0
    acks: dict[int, Ack] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)


class ReferenceModel:
    """What the target holds after each step; one instance per scenario."""

    def __init__(
        self, target: Target, sinks: list[Sink], parents: set[int] | None = None
    ) -> None:
        self.target = target
        self.sinks = {s.sink_id: s for s in sinks}
        self.parents = set(parents or ())
        self.rows: dict[tuple, dict[str, Any]] = {}
        """By collated key; each with its columns as stored."""
        self.tombstones: dict[tuple, Tombstone] = {}
        """By collated key: the target's, whichever sink recorded them."""
        self.updated: set[tuple] = set()
        """Keys whose stored row an upsert changed since ``take_stamped``."""
        self.inserted: set[tuple] = set()
        """Keys whose row was inserted since ``take_stamped``."""
        self.audit: list[str] = []
        """What the AFTER INSERT trigger wrote: each insert's first key column."""
        self.children: Counter[tuple] = Counter()
        """Rows of the child table per collated key."""
        self.u_rows: dict[Any, dict[str, Any]] = {}
        """A routed sink's second table, by ``uid``."""
        self.u_tombstones: dict[Any, Tombstone] = {}
        """A versioned ``u``'s tombstones, by ``uid`` (they never expire here)."""
        self.truncated: dict[str, Tombstone] = {}
        """Each table's truncate tombstone T ("t", "u")."""
        self.state = {s.sink_id: SinkState() for s in sinks}
        self.events: dict[tuple, dict[Any, Any]] = {}
        """A history's events by collated key: version -> DELETE or the upsert's
        values."""
        self.spelling: dict[tuple, dict[Any, dict[str, Any]]] = {}
        """A history's key columns as each event (by version) was first spelt: its
        records take its first event's (by version) spelling."""
        self.history: dict[tuple, list[dict[str, Any]]] = {}
        """A history's records by collated key, sorted by ``__START_AT``."""
        self.floors: dict[tuple, Floor] = {}
        """A history's floors by collated key (history_retention)."""
        self.aged: set[tuple[tuple, Any]] = set()
        """(key, version) of the events applied before time passed (old)."""
        self.chunk_deletes: set[tuple] = set()
        """(key, version) of the history deletes of the chunk being applied (its
        CHUNK_ROWS records): an upsert there is no event, wherever in the chunk."""
        self.chunk_floored: set[tuple] = set()
        """(key, version) of the chunk's records set aside below a floor: one
        event, the chunk's others there skipped."""
        self.effects: Counter = Counter()
        """What the merge did that a feature exists for (``KEPT_NULL``,
        ``TRUNCATED``, ``TRUNCATE_STALE``, ``SPLIT``, ``IN_PLACE``, ``FOLDED``)."""
        self.owned = owned_columns(self)
        """The target columns the model holds: those a sink not refused writes."""

    # -- refusals -----------------------------------------------------------------

    def refusal(self, sink_id: str) -> str | None:
        """Why the sink must refuse to start (ConfigError), or None."""
        found = self.refusals(sink_id)
        return found[0] if found else None

    def refusals(self, sink_id: str) -> list[str]:
        """Every reason the sink must refuse to start, each naming its columns
        (``[...]``) or the tombstones (the sink names one: which is its order)."""
        sink, target = self.sinks[sink_id], self.target
        found = []
        if sink.scd_type == 2:
            modes = [c for c, mode in sink.merge if mode != "overwrite"]
            if modes:
                found.append(f"a merge mode other than overwrite in a history: {modes}")
            if not target.history:
                found.append(f"not a history table: {[START_AT, END_AT]}")
        if sink.version and sink.version not in sink.stream:
            found.append(
                f"the version column is absent from the stream: {[sink.version]}"
            )
        named = [*sink.key, *dict(sink.merge)]
        if sink.cdc:
            named += [sink.cdc.op_column, sink.cdc.order_by]
        absent = [c for c in named if c not in sink.stream]
        if absent:
            found.append(f"named column(s) absent from the stream: {absent}")
        keep = [c for c in sink.written if sink.rule(c).never_changes]
        on_update = [c for c in (*sink.key, *keep) if target.column(c).on_update]
        if on_update:
            found.append(f"key or keep column(s) with ON UPDATE: {on_update}")
        generated = [c for c in sink.written if target.column(c).generated]
        if generated:
            found.append(f"generated column(s) in the stream: {generated}")
        unwritten = [
            c.name
            for c in target.columns
            if not c.nullable
            and not c.has_default
            and not c.auto_increment
            and not c.generated
            and c.name not in sink.written
        ]
        if unwritten:
            found.append(f"NOT NULL column(s) without default not written: {unwritten}")
        triggered = [c for c in target.before_trigger_sets if c in sink.written]
        if triggered:
            found.append(f"a BEFORE trigger assigns stream column(s): {triggered}")
        narrow = [
            c
            for c in (*sink.key, sink.version)
            if c in sink.written and target.column(c).narrows
        ]
        if narrow:
            found.append(f"key or version column(s) narrower than the stream: {narrow}")
        if sink.shared_tombstones:
            found.append(f"two tables share one tombstone table: {['t_tombstones']}")
        if sink.unique_conflicts == "refuse" and self._reachable(sink):
            found.append(f"another unique index is reachable: {self._reachable(sink)}")
        if not sink.guarded and any(
            other.guarded and self.refusal(other.sink_id) is None
            for other in self.sinks.values()
            if other.sink_id != sink_id
        ):
            found.append("another sink guards this target's deletes with tombstones")
        if not (sink.cdc and sink.cdc.truncate_values) and any(
            other.cdc
            and other.cdc.truncate_values
            and self.refusal(other.sink_id) is None
            for other in self.sinks.values()
            if other.sink_id != sink_id
        ):
            found.append(
                "another sink truncates this target, this one cannot honour it: "
                f"{['t_tombstones_truncate']}"
            )
        return found

    def _reachable(self, sink: Sink) -> list[tuple[str, ...]]:
        """Other unique indexes every column of which the stream writes."""
        return [
            index
            for index in self.target.unique
            if all(c in sink.written for c in index)
        ]

    # -- staging and applying ---------------------------------------------------

    def stage(self, sink_id: str, records: list[dict[str, Any]]) -> int:
        """Stage ``records`` (in apply order) as the sink's next batch; its id."""
        state = self.state[sink_id]
        batch_id = state.next_batch
        state.batches[batch_id] = [dict(r) for r in records]
        state.next_batch += 1
        return batch_id

    def pending(self, sink_id: str) -> list[int]:
        """Staged batches without an ack, in order."""
        state = self.state[sink_id]
        return sorted(b for b in state.batches if b not in state.acks)

    def apply(self, sink_id: str, count: int | None = None) -> list[int]:
        """Apply the ``count`` lowest pending batches (all by default), in order;
        returns their ids."""
        ids = self.pending(sink_id)[:count]
        for batch_id in ids:
            self._apply_batch(sink_id, batch_id)
        return ids

    def _apply_batch(self, sink_id: str, batch_id: int) -> None:
        state = self.state[sink_id]
        ack = Ack()
        records = state.batches[batch_id]
        position = {id(r): i for i, r in enumerate(records)}
        sink = self.sinks[sink_id]
        chunks: dict[int, set[tuple]] = {}
        for i, r in enumerate(records):
            if sink.scd_type == 2 and self._is_delete(sink, r):
                key = (self._key(sink, r), r.get(sink.version))
                chunks.setdefault(i // CHUNK_ROWS, set()).add(key)
        at = None
        for record in self.routed_order(sink_id, records):
            if position[id(record)] // CHUNK_ROWS != at:
                at = position[id(record)] // CHUNK_ROWS
                self.chunk_deletes, self.chunk_floored = chunks.get(at, set()), set()
            outcome, kinds = self.apply_record(sink_id, record)
            if outcome == QUARANTINED:
                kept = self.set_aside_record(sink_id, record)
                state.entries.append(
                    Entry(batch_id, kept, position[id(record)], kinds=kinds)
                )
            ack.count(self.table_of(sink_id, record), outcome)
        state.acks[batch_id] = ack
        self.chunk_deletes, self.chunk_floored = set(), set()

    def set_aside_record(self, sink_id: str, record: dict[str, Any]) -> dict:
        """The record a row set aside keeps: whole, or, routed to a table, the
        columns that table takes with the route (and op): what a retry needs."""
        sink = self.sinks[sink_id]
        route = record.get(Routed.ROUTE) if sink.routed else None
        if route not in ("t", "u"):
            if sink.routed is None:  # the table takes all but its excepted columns
                return {c: v for c, v in record.items() if c not in sink.excepted}
            return dict(record)
        taken = sink.written if route == "t" else sink.routed.columns
        extra = (Routed.ROUTE, *([sink.cdc.op_column] if sink.cdc else []))
        return {c: record[c] for c in (*taken, *extra) if c in record}

    def table_of(self, sink_id: str, record: dict[str, Any]) -> str | None:
        """The table a routed sink's record counts under (``""``: none); None for
        a sink of one table."""
        if self.sinks[sink_id].routed is None:
            return None
        route = record.get(Routed.ROUTE)
        return route if route in ("t", "u") else ""

    def set_aside(self, sink_id: str, batch_id: int) -> None:
        """``quarantine-batch N``: the lowest pending batch, whole, to quarantine."""
        if self.pending(sink_id)[:1] != [batch_id]:
            raise ValueError(f"batch {batch_id} is not the lowest pending one")
        state = self.state[sink_id]
        records = state.batches[batch_id]
        whole = frozenset({WHOLE})
        state.entries += [
            Entry(batch_id, dict(r), i, kinds=whole) for i, r in enumerate(records)
        ]
        state.acks[batch_id] = Ack(quarantined=len(records), state="quarantined")

    def replay(self, sink_id: str, first: int, last: int) -> list[int]:
        """``replay --from first --to last --force``: batches still in the WAL applied
        again (acked ones) or for the first time, in order; earlier entries of a
        re-applied batch are superseded. Returns the batches applied."""
        state = self.state[sink_id]
        if any(b < first for b in self.pending(sink_id)):
            raise ValueError("replay would run ahead of pending batches")
        done = []
        for batch_id in range(first, last + 1):
            if batch_id not in state.batches:
                continue
            for entry in state.entries:
                if entry.batch_id == batch_id:
                    entry.superseded = True
            self._apply_batch(sink_id, batch_id)
            done.append(batch_id)
        return done

    def purge(self, sink_id: str, before: int) -> None:
        """``purge --before N``: acked batches below N leave the WAL with their ack
        rows, and so do the ack rows an earlier purge left of batches below them no
        longer in the WAL (the newest ack row stays); the sink's expired tombstones
        go, but never one of a key with an open quarantined upsert."""
        state = self.state[sink_id]
        newest = max(state.acks, default=None)
        removed = [b for b in state.batches if b < before and b in state.acks]
        for batch_id in removed:
            del state.batches[batch_id]
        for batch_id in [b for b in state.acks if removed and b <= max(removed)]:
            if batch_id != newest and batch_id not in state.batches:
                del state.acks[batch_id]
        sink = self.sinks[sink_id]
        if sink.retention:
            self._fold(sink)
        if not sink.guarded:
            return
        held = self._keys_with_open_upserts()
        for key, stone in list(self.tombstones.items()):
            if stone.sink_id == sink_id and stone.expired and key not in held:
                del self.tombstones[key]

    def _keys_with_open_upserts(self) -> set[tuple]:
        keys = set()
        for sink_id, state in self.state.items():
            sink = self.sinks[sink_id]
            for entry in state.entries:
                if sink.routed and entry.record.get(Routed.ROUTE) != "t":
                    continue
                if entry.retriable and not self._removes(sink, entry.record):
                    key = self._key(sink, entry.record)
                    if key is not None:
                        keys.add(key)
        return keys

    def retry(self, sink_id: str, through: int | None = None) -> None:
        """``quarantine retry``: each open, non-superseded entry (of batches up to
        ``through``), in batch order, applied now through the merge rules; one
        refused again stays open."""
        state = self.state[sink_id]
        todo = [e for e in state.entries if e.retriable]
        if self.sinks[sink_id].routed:  # each batch's entries routed again
            todo.sort(key=lambda e: e.position)
        todo.sort(key=lambda e: e.batch_id)  # stable: set-aside order within one
        for batch_id in sorted({e.batch_id for e in todo}):
            if through is not None and batch_id > through:
                continue
            entries = [e for e in todo if e.batch_id == batch_id]
            by_record = {id(e.record): e for e in entries}
            records = [e.record for e in entries]
            for record in self.routed_order(sink_id, records):
                self.chunk_floored = set()  # a retry refused again goes one by one
                if self.apply_record(sink_id, record)[0] != QUARANTINED:
                    by_record[id(record)].is_open = False

    def routed_order(
        self, sink_id: str, records: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """``records`` (in staged order) in the order they are applied: as they are,
        or, routed, in runs of upserts (``t``'s first) and of deletes and truncates
        (``u``'s)."""
        sink = self.sinks[sink_id]
        if sink.routed is None:
            return records
        ordered: list[dict[str, Any]] = []
        runs = itertools.groupby(records, key=lambda r: self._removes(sink, r))
        for deletes, run in runs:
            held = list(run)
            first = "u" if deletes else "t"
            ordered += [r for r in held if r.get(Routed.ROUTE) == first]
            ordered += [r for r in held if r.get(Routed.ROUTE) not in (first,)]
        return ordered

    def open_entries(self, sink_id: str) -> list[Entry]:
        """Entries a retry would apply."""
        return [e for e in self.state[sink_id].entries if e.retriable]

    # -- the operator's fixes and time --------------------------------------------

    def add_parent(self, parent_id: int) -> None:
        self.parents.add(parent_id)

    def add_child(self, key: tuple) -> bool:
        """A child row referencing the row of ``key`` (collated); False when there
        is no such row."""
        if key not in self.rows:
            return False
        self.children[key] += 1
        return True

    def remove_children(self) -> None:
        self.children.clear()

    def take_stamped(self) -> tuple[set[tuple], set[tuple]]:
        """The keys whose row was changed, and those whose row was inserted, since
        the last call (and forget them)."""
        found = (self.updated, self.inserted)
        self.updated, self.inserted = set(), set()
        return found

    def age_events(self) -> None:
        """Time passes beyond the history's retention: every event applied so far
        is old (the next purge folds it)."""
        self.aged |= {(k, v) for k, events in self.events.items() for v in events}

    def expire_tombstones(self) -> None:
        """Time passes beyond every retention: every tombstone is old enough to
        expire (at the next purge of its sink)."""
        for stone in self.tombstones.values():
            stone.expired = True

    # -- one record ---------------------------------------------------------------

    def apply_record(
        self, sink_id: str, record: dict[str, Any]
    ) -> tuple[str, frozenset[str]]:
        """Apply one record now: APPLIED, DELETED, QUARANTINED or SKIPPED, and
        (set aside) the kinds of reason it may be set aside for."""
        sink = self.sinks[sink_id]
        if sink.routed is not None:
            route = record.get(Routed.ROUTE)
            if route not in ("t", "u"):
                return QUARANTINED, frozenset({ROUTE})
            if self._is_truncate(sink, record):
                return _outcome(self._truncate(sink, route, record))
            if route == "u":
                return _outcome(self._apply_u(sink, record))
        elif self._is_truncate(sink, record):
            return _outcome(self._truncate(sink, "t", record))
        if sink.scd_type == 2:
            return _outcome(self._event(sink, record))
        key = self._key(sink, record)
        if key is None:
            return QUARANTINED, frozenset({NULL_KEY} | self._faults(sink, record))
        if self._is_delete(sink, record):
            return _outcome(self._delete(sink, key, record))
        return _outcome(self._upsert(sink, key, record))

    def _key(self, sink: Sink, record: dict[str, Any]) -> tuple | None:
        values = [record.get(k) for k in sink.key]
        if any(v is None for v in values):
            return None
        return tuple(self.target.column(k).collate(v) for k, v in zip(sink.key, values))

    @staticmethod
    def _is_delete(sink: Sink, record: dict[str, Any]) -> bool:
        return sink.cdc is not None and record.get(sink.cdc.op_column) in (
            sink.cdc.delete_values
        )

    @staticmethod
    def _is_truncate(sink: Sink, record: dict[str, Any]) -> bool:
        return sink.cdc is not None and record.get(sink.cdc.op_column) in (
            sink.cdc.truncate_values
        )

    def _removes(self, sink: Sink, record: dict[str, Any]) -> bool:
        """A delete or a truncate (they run together, routed)."""
        return self._is_delete(sink, record) or self._is_truncate(sink, record)

    def _stale(self, table: str, stone: Tombstone | None, version: Any) -> bool:
        """Whether an upsert at ``version`` is stale: at or below the key's
        tombstone ``stone`` or the table's truncate tombstone (a NULL version is,
        once either exists)."""
        cut = self.truncated.get(table)
        if cut is not None and (version is None or version <= cut.version):
            self.effects[TRUNCATE_STALE] += 1
            return True
        return stone is not None and (version is None or version <= stone.version)

    def _tombstone(self, key: tuple) -> Any:
        """The key's tombstone version, whichever sink left it; None."""
        stone = self.tombstones.get(key)
        return None if stone is None else stone.version

    def _faults(
        self, sink: Sink, record: dict[str, Any], stored: dict | None = None
    ) -> set[str]:
        """What is wrong with an upsert's values whatever the table holds (the
        range of an ``add`` into ``stored`` is judged by its sum instead)."""
        found = set()
        for name in sink.written:
            column, value = self.target.column(name), record.get(name)
            if value is None:
                kept = stored is not None and sink.rule(name).keeps_nulls
                if not column.nullable and not kept:
                    found.add(NULL)
            elif isinstance(value, float) and not math.isfinite(value):
                found.add(NOT_FINITE)
            elif not (stored is not None and sink.rule(name).sums) and not (
                column.fits(value)
            ):
                found.add(RANGE)
            elif column.fits(value) and not column.lands(value):
                found.add(NARROW)
        return found

    def _upsert(self, sink: Sink, key: tuple, record: dict[str, Any]) -> Any:
        target = self.target
        version = record.get(sink.version) if sink.version else None
        if sink.guarded:  # stale history is skipped before its values are judged
            if version is not None and not target.column(sink.version).fits(version):
                faults = self._faults(sink, record, self.rows.get(key))
                return QUARANTINED, {VERSION, RANGE} | faults
            if self._stale("t", self.tombstones.get(key), version):
                return SKIPPED
        stored = self.rows.get(key)
        faults = self._faults(sink, record, stored)
        if stored is None:
            new = {c: None for c in self.owned}
            new.update({c: record.get(c) for c in sink.written})
        else:
            new = self._merged(sink, stored, record)
            if new is None:
                faults.add(RANGE)
        if new is not None:  # MySQL may name a constraint before a bad value
            faults |= self._refused_by_constraints(sink, key, stored, new)
        if faults:
            return QUARANTINED, faults
        self.rows[key] = new
        if stored is None:
            self.inserted.add(key)
            self.audit.append(str(new[self.target.key[0]]))
        elif new != stored:
            self.updated.add(key)
        return APPLIED

    def _merged(
        self, sink: Sink, stored: dict[str, Any], record: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The stored row after the record's merge; None when an ``add`` leaves its
        column's range."""
        new = dict(stored)
        newer = True
        if sink.version:
            old, version = stored.get(sink.version), record.get(sink.version)
            newer = old is None or (version is not None and version >= old)
        for name in sink.written:
            if name in sink.key:
                continue
            rule = sink.rule(name)
            new[name] = rule.merged(stored.get(name), record.get(name), newer)
            if rule.keeps_nulls and newer and record.get(name) is None:
                self.effects[KEPT_NULL] += stored.get(name) is not None
            total = new[name]
            if (
                rule.sums
                and total is not None
                and not self.target.column(name).fits(total)
            ):
                return None
        return new

    def _refused_by_constraints(
        self,
        sink: Sink,
        key: tuple,
        stored: dict[str, Any] | None,
        new: dict[str, Any],
    ) -> set[str]:
        """What refuses the new row: a missing parent of a written foreign key
        value (1452), a unique value another key's row holds (a unique_conflicts =
        "quarantine" sink); every one that does (MySQL names either)."""
        found = set()
        fk = self.target.fk_column
        if fk is not None and fk in sink.written:
            value = new.get(fk)
            changed = stored is None or stored.get(fk) != value
            if value is not None and changed and value not in self.parents:
                found.add(PARENT)
        for index in self.target.unique:
            if not all(c in sink.written for c in index):
                continue
            mine = self._collated(index, new)
            if mine is None or (
                stored is not None and self._collated(index, stored) == mine
            ):
                continue
            if any(
                other_key != key and self._collated(index, row) == mine
                for other_key, row in self.rows.items()
            ):
                found.add(UNIQUE)
        return found

    def _collated(self, index: tuple[str, ...], row: dict[str, Any]) -> tuple | None:
        values = [row.get(c) for c in index]
        if any(v is None for v in values):
            return None  # NULLs never collide
        return tuple(self.target.column(c).collate(v) for c, v in zip(index, values))

    def _delete(self, sink: Sink, key: tuple, record: dict[str, Any]) -> Any:
        version = record.get(sink.version) if sink.guarded else None
        if version is not None and not self.target.column(sink.version).fits(version):
            return QUARANTINED, {VERSION, RANGE}
        stored = self.rows.get(key)
        removes = stored is not None and (
            not sink.guarded
            or stored.get(sink.version) is None
            or (version is not None and stored[sink.version] <= version)
        )
        if removes and self.children[key] and self.target.child == "restrict":
            return QUARANTINED, {CHILD}
        if removes and any(self._refs(row) == key for row in self.u_rows.values()):
            return QUARANTINED, {CHILD}  # u's rows reference it (RESTRICT)
        if removes:
            del self.rows[key]
            self.children.pop(key, None)
        if sink.guarded and version is not None:
            stone = self.tombstones.get(key)
            if stone is None or version >= stone.version:
                self.tombstones[key] = Tombstone(version, sink.sink_id)
        return DELETED

    def _truncate(self, sink: Sink, table: str, record: dict[str, Any]) -> Any:
        """Delete every row of ``table`` whose version is <= the record's or NULL
        (one statement: a RESTRICT child row of one refuses it whole), then raise
        the table's truncate tombstone."""
        version = record.get(sink.version)
        if version is None:
            return QUARANTINED, {TRUNCATE}
        if not self.target.column(sink.version).fits(version):
            return QUARANTINED, {TRUNCATE, VERSION, RANGE}
        rows = self.u_rows if table == "u" else self.rows
        gone = [
            key
            for key, row in rows.items()
            if row.get(sink.version) is None or row[sink.version] <= version
        ]
        if table == "t":
            refs = {self._refs(row) for row in self.u_rows.values()}
            restrict = self.target.child == "restrict"
            if any(k in refs or (restrict and self.children[k]) for k in gone):
                return QUARANTINED, {CHILD}
        for key in gone:
            del rows[key]
            if table == "t":
                self.children.pop(key, None)
        self.effects[TRUNCATED] += bool(gone)
        cut = self.truncated.get(table)
        if cut is None or version >= cut.version:
            self.truncated[table] = Tombstone(version, sink.sink_id)
        return DELETED

    # -- a history ------------------------------------------------------------------

    def _event(self, sink: Sink, record: dict[str, Any]) -> Any:
        """A history sink's record: its key's events gain it, its records are
        computed again."""
        delete = self._is_delete(sink, record)
        key, version = self._key(sink, record), record.get(sink.version)
        kinds = set()
        if key is None:
            kinds.add(NULL_KEY)
        if version is None:
            kinds.add(NO_VERSION)
        elif not self.target.column(sink.version).fits(version):
            kinds |= {VERSION, RANGE}
        if kinds:
            return QUARANTINED, kinds | (
                set() if delete else self._faults(sink, record)
            )
        if not delete:  # values are judged before the version
            faults = self._faults(sink, record)
            if faults:
                return QUARANTINED, faults
        events = self.events.get(key, {})
        held = events.get(version)
        if held is not None and (held == DELETE or not delete):
            return SKIPPED  # seen again, or an upsert at a delete's version
        if not delete and (key, version) in self.chunk_deletes:
            return SKIPPED  # its chunk deletes the key at its version
        floor = self.floors.get(key)
        if floor is not None and version <= floor.version:
            if (key, version) in self.chunk_floored:
                return SKIPPED  # one event with the chunk's first there
            self.chunk_floored.add((key, version))
            return QUARANTINED, {FLOOR}  # folded: it can no longer be placed
        self.events[key] = {**events, version: DELETE if delete else dict(record)}
        # the event's row keeps the spelling it was first added with (a delete
        # replacing an upsert changes only its op)
        self.spelling.setdefault(key, {}).setdefault(
            version, {k: record[k] for k in sink.key}
        )
        before = self.history.get(key, [])
        self.history[key] = self._records(sink, key, version)
        if not delete and self._splits(before, self.history[key], self.events[key]):
            self.effects[SPLIT] += 1
        return DELETED if delete else APPLIED

    def _records(
        self, sink: Sink, key: tuple, new: Any, upto: Any = None
    ) -> list[dict[str, Any]]:
        """The key's records: its events sorted by version, each upsert ending the
        open record and opening one or updating it in place; a delete ending it.
        ``new``: the version just added (an in-place update of an untracked column
        there is counted). With a floor: the records it kept, then its record open
        from its start with its values, then the events above it. ``upto``: only
        the events up to that version."""
        floor = self.floors.get(key)
        events = {
            v: e
            for v, e in self.events.get(key, {}).items()
            if upto is None or v <= upto
        }
        records = [dict(r) for r in floor.kept] if floor else []
        spelling = floor.spelling if floor else self.spelling[key][min(events)]
        ordered = sorted(events.items())
        if floor is not None and floor.values is not None:
            ordered.insert(0, (floor.start, floor.values))
        open_: dict[str, Any] | None = None
        for version, event in ordered:
            if event == DELETE:
                if open_ is not None:
                    open_[END_AT] = version
                open_ = None
                continue
            values = {c: event.get(c) for c in sink.written if c not in sink.key}
            if open_ is not None and sink.ignore_nulls:
                values = {
                    c: open_[c] if v is None and c != sink.version else v
                    for c, v in values.items()
                }
            if open_ is not None and all(
                values[c] == open_[c] for c in values if sink.tracks(c)
            ):
                changed = any(
                    values[c] != open_[c]
                    for c in values
                    if c not in sink.key and c != sink.version
                )
                self.effects[IN_PLACE] += version == new and changed
                open_.update(values)
                continue
            if open_ is not None:
                open_[END_AT] = version
            open_ = {
                **dict.fromkeys(self.owned),
                **values,
                **spelling,  # the first event's, by version
                START_AT: version,
                END_AT: None,
            }
            records.append(open_)
        return records

    @staticmethod
    def _splits(before: list[dict], after: list[dict], events: dict) -> bool:
        """Whether the upsert just added (the last of ``events``) split a record:
        it opened one inside the span of a record, and later events exist."""
        version = list(events)[-1]
        inside = any(
            r[START_AT] < version and (r[END_AT] is None or r[END_AT] > version)
            for r in before
        )
        opened = any(r[START_AT] == version for r in after)
        return inside and opened and any(v > version for v in events)

    def _fold(self, sink: Sink) -> None:
        """Each key with an old event: its events up to the newest old one (F)
        become its floor; its records stay as they are."""
        for key, events in self.events.items():
            old = [v for v in events if (key, v) in self.aged]
            if not old:
                continue
            at = max(old)
            floor = self.floors.get(key)
            made = self._records(sink, key, None, upto=at)
            open_ = made.pop() if made and made[-1][END_AT] is None else None
            values = None
            if open_ is not None:
                values = {c: open_[c] for c in sink.written if c not in sink.key}
            self.floors[key] = Floor(
                at,
                values,
                at if open_ is None else open_[START_AT],
                floor.spelling if floor else self.spelling[key][min(events)],
                tuple(made),
            )
            self.events[key] = {v: e for v, e in events.items() if v > at}
            self.aged -= {(key, v) for v in events if v <= at}
            self.effects[FOLDED] += 1
            if self._records(sink, key, None) != self.history.get(key, []):
                raise AssertionError(f"the model's fold of {key} changed its records")

    def history_rows(self) -> dict[tuple, dict[str, Any]]:
        """Every record of every key, by (collated key, ``__START_AT``)."""
        return {
            (key, record[START_AT]): record
            for key, records in self.history.items()
            for record in records
        }

    def event_count(self) -> int:
        """Rows of the events table: one per key and version, one per floor."""
        return sum(len(events) for events in self.events.values()) + len(self.floors)

    # -- a routed sink's second table ---------------------------------------------

    def _refs(self, row: dict[str, Any]) -> tuple | None:
        """The collated ``t`` key a ``u`` row references; None."""
        ref = row.get("ref")
        return (
            None
            if ref is None
            else (self.target.column(self.target.key[0]).collate(ref),)
        )

    def _apply_u(self, sink: Sink, record: dict[str, Any]) -> Any:
        """A record of ``u``; versioned (``Routed.versioned``), with ``t``'s rules
        for versions: tombstones, stale upserts, older values not written."""
        uid = record.get("uid")
        if uid is None:
            return QUARANTINED, {NULL_KEY}
        versioned = sink.routed.versioned and sink.guarded
        version = record.get("v") if versioned else None
        if version is not None and not self.target.column("v").fits(version):
            return QUARANTINED, {VERSION, RANGE}
        stored = self.u_rows.get(uid)
        if self._is_delete(sink, record):
            if stored is not None and (
                not versioned
                or stored["v"] is None
                or (version is not None and stored["v"] <= version)
            ):
                del self.u_rows[uid]
            stone = self.u_tombstones.get(uid)
            if version is not None and (stone is None or version >= stone.version):
                self.u_tombstones[uid] = Tombstone(version, sink.sink_id)
            return DELETED
        if versioned and self._stale("u", self.u_tombstones.get(uid), version):
            return SKIPPED
        newer = (
            not versioned
            or stored is None
            or stored["v"] is None
            or (version is not None and version >= stored["v"])
        )
        new = dict(stored or dict.fromkeys(sink.routed.columns))
        new["uid"] = uid
        if newer:
            new["rid"], new["ref"] = record.get("rid"), record.get("ref")
            if versioned:
                new["v"] = version
        w = record.get("w")
        rule = MODE_RULES[sink.routed.w_policy]
        new["w"] = w if stored is None else rule.merged(stored["w"], w, newer)
        changed = stored is None or stored["ref"] != new["ref"]
        if new["ref"] is not None and changed and self._refs(new) not in self.rows:
            return QUARANTINED, {PARENT}  # no t row of that key (1452)
        self.u_rows[uid] = new
        return APPLIED


def _outcome(result: Any) -> tuple[str, frozenset[str]]:
    """An outcome, or (QUARANTINED, kinds), as ``apply_record`` returns it."""
    if isinstance(result, tuple):
        return result[0], frozenset(result[1])
    return result, frozenset()


def owned_columns(model: ReferenceModel) -> list[str]:
    """The target columns a sink that is not refused writes, in stream order."""
    names: list[str] = []
    for sink_id, sink in model.sinks.items():
        if model.refusal(sink_id) is None:
            names += [c for c in sink.written if c not in names]
    return names
