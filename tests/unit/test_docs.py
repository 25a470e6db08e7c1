"""The documentation holds to the code.

- Every test file and test function the README or a page of docs/ cites
  (``test_x.py``, ``test_x.py::test_y`` or a bare ``test_y`` in backticks) is in
  tests/, so a renamed or removed test cannot leave a claim behind that nothing
  proves any more.
- The configuration reference the site generates lists every key of the schema.
- Every ``sink.method(`` a page tells users to call is a method of ``WalSink``.
- The metrics table of the operations page lists every metric the sink defines,
  with its type.
- The protocol page's table lists the invariants I1, I2, … in order, and every
  page that names their range (``I1–In``) names the same last one.
"""

from __future__ import annotations

import re
from pathlib import Path

from devtools.docs_hooks import config_reference, target_schema
from wal_sink.config import config_schema

ROOT = Path(__file__).resolve().parents[2]
INVARIANT_ROW = re.compile(r"^\| \*\*I(\d+) ", re.MULTILINE)
INVARIANT_RANGE = re.compile(r"\bI1[–-]I(\d+)\b")
SINK_CALL = re.compile(r"\bsink\.(\w+)\(")
CITED = re.compile(r"`((?:tests/\w+/)?(test_\w+)\.py)(?:::(test_\w+))?`|`(test_\w+)`")
TEST_DEF = re.compile(r"^\s*(?:async\s+)?def (test_\w+)\(", re.MULTILINE)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def defined_tests() -> dict[str, set[str]]:
    """Test module file name -> the test functions it defines (a unit and an
    integration module of one name together)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        tests = TEST_DEF.findall(path.read_text(encoding="utf-8"))
        found.setdefault(path.name, set()).update(tests)
    return found


def missing_citations(text: str, tests: dict[str, set[str]]) -> list[str]:
    every_test = set().union(*tests.values())
    missing = []
    for match in CITED.finditer(text):
        file, module, func, bare = match.groups()
        if bare:
            if bare not in every_test:
                missing.append(bare)
        elif f"{module}.py" not in tests:
            missing.append(file)
        elif func and func not in tests[f"{module}.py"]:
            missing.append(f"{file}::{func}")
    return missing


def test_every_test_the_docs_cite_exists():
    tests = defined_tests()
    missing = {
        path.relative_to(ROOT).as_posix(): found
        for path in documents()
        if (found := missing_citations(path.read_text(encoding="utf-8"), tests))
    }
    assert not missing, f"the docs cite tests that do not exist: {missing}"


def test_a_citation_of_a_missing_test_is_found():
    tests = {"test_a.py": {"test_one"}}
    assert missing_citations("`test_a.py::test_one`, `test_one`", tests) == []
    assert missing_citations("`test_a.py::test_two` `test_b.py` `test_two`", tests) == [
        "test_a.py::test_two",
        "test_b.py",
        "test_two",
    ]


def schema_keys(schema: dict, defs: dict, prefix: str = "") -> set[str]:
    """Every key of the config, dotted (``mysql.url``), nested sections included."""
    keys = set()
    for name, field in schema.get("properties", {}).items():
        keys.add(f"{prefix}{name}")
        target = target_schema(field, defs)
        if target.get("type") == "object" and "properties" in target:
            keys |= schema_keys(target, defs, f"{prefix}{name}.")
    return keys


def test_the_configuration_reference_lists_every_key_of_the_schema():
    schema = config_schema()
    rows = set()
    section = ""
    for line in config_reference(schema).splitlines():
        if line.startswith("### `["):
            section = line[len("### `[") : -len("]`")]
        elif line.startswith("| `"):
            rows.add(f"{section}.{line.split('`')[1]}")
    sections = set(schema["properties"])
    expected = {k for k in schema_keys(schema, schema["$defs"]) if k not in sections}
    assert expected <= rows, f"keys missing from the reference: {expected - rows}"
    nested = {"mysql.outage_budget", "job.restart.strategy", "transform.watermark.expr"}
    assert nested <= rows


def test_every_sink_method_the_docs_call_exists():
    from wal_sink.spark.sink import WalSink

    called = {
        (path.name, name)
        for path in documents()
        for name in SINK_CALL.findall(path.read_text(encoding="utf-8"))
    }
    assert called, "no sink.method( found: the pattern no longer matches the docs"
    missing = sorted(c for c in called if not callable(getattr(WalSink, c[1], None)))
    assert not missing, f"the docs call WalSink methods that do not exist: {missing}"


def test_the_invariants_are_listed_in_order_and_every_range_names_them_all():
    rows = [
        int(n) for n in INVARIANT_ROW.findall((ROOT / "docs/protocol.md").read_text())
    ]
    assert rows == list(range(1, len(rows) + 1)), f"protocol.md lists them as {rows}"
    ranges = {
        (path.name, int(last))
        for path in documents()
        for last in INVARIANT_RANGE.findall(path.read_text(encoding="utf-8"))
    }
    assert ranges and all(last == len(rows) for _, last in ranges), ranges


def test_the_metrics_table_lists_every_metric_with_its_type():
    from wal_sink.metrics import SinkMetrics

    rows = re.findall(
        r"^\| `(wal_sink_\w+)` \| (\w+) \|",
        (ROOT / "docs/operations.md").read_text(encoding="utf-8"),
        re.MULTILINE,
    )
    defined = {
        (f"{m.name}_total" if m.type == "counter" else m.name, m.type)
        for m in SinkMetrics("s").registry.collect()
    }
    assert defined - set(rows) == set(), "metrics missing from the docs table"
    assert set(rows) - defined == set(), "the docs table lists metrics not defined"
