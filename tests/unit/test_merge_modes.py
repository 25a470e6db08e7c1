"""Merge modes are objects (merge/modes.py): each has its rule in the reference
model, its row in docs/merge.md, and its own start-up refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import config_dict
from tests.reference_model import MODE_RULES
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.merge.modes import MODES, NEGATIVE
from wal_sink.mysql.target_profile import ColumnFacts

MERGE_DOC = Path(__file__).parents[2] / "docs" / "merge.md"


def test_every_merge_mode_has_a_rule_in_the_model_and_a_row_in_the_docs():
    assert set(MODE_RULES) == set(MODES)
    doc = MERGE_DOC.read_text()
    for name in MODES:
        assert f'`mysql.merge = {{ col = "{name}" }}`' in doc, name


def merging(name: str) -> dict:
    mysql = config_dict()["mysql"]
    return config_dict(mysql={**mysql, "merge": {"n": name}})


def test_the_config_takes_every_mode_by_name_and_refuses_another():
    for name in MODES:
        target = config_from_dict(merging(name)).mysql.target
        assert target.mode("n") is MODES[name]
    assert config_from_dict(config_dict()).mysql.target.mode("n") is MODES["overwrite"]
    with pytest.raises(ConfigError, match="'overwrite', 'add' or 'keep'"):
        config_from_dict(merging("sum"))


def facts(data_type: str, column_type: str, extra: str = "") -> ColumnFacts:
    return ColumnFacts("n", data_type, column_type, True, None, extra, False)


@pytest.mark.parametrize(
    "mode, column, refused",
    [
        ("add", facts("decimal", "decimal(12,2)"), None),
        ("add", facts("bigint", "bigint(20) unsigned"), None),
        ("add", facts("varchar", "varchar(20)"), "is VARCHAR(20), not numeric"),
        ("keep", facts("varchar", "varchar(20)"), None),
        (
            "keep",
            facts("datetime", "datetime", "on update current_timestamp()"),
            "is a keep column (mysql.merge) but has ON UPDATE CURRENT_TIMESTAMP()",
        ),
        (
            "overwrite",
            facts("datetime", "datetime", "on update current_timestamp()"),
            None,
        ),
    ],
)
def test_a_mode_refuses_only_columns_it_cannot_work_on(mode, column, refused):
    said = MODES[mode].refusal(column, "mysql", "t")
    assert (said is None) if refused is None else (refused in said)


def test_only_add_into_unsigned_and_a_kept_null_into_not_null_go_by_key():
    signed, unsigned = facts("int", "int(11)"), facts("int", "int(10) unsigned")
    assert [m.name for m in MODES.values() if m.by_key(unsigned)] == ["add"]
    assert MODES["add"].by_key(unsigned) is NEGATIVE
    assert not any(m.by_key(signed) for m in MODES.values())
    required = ColumnFacts("n", "int", "int(11)", False, None, "", False)
    assert not any(m.by_key(required) for m in MODES.values())
    for mode in MODES.values():  # ignore_null_updates: a NOT NULL column's NULLs
        assert mode.ignoring_nulls().by_key(required).held(None)
        assert mode.ignoring_nulls().by_key(signed) is None
    both = (
        MODES["add"]
        .ignoring_nulls()
        .by_key(ColumnFacts("n", "int", "int(10) unsigned", False, None, "", False))
    )
    assert [both.held(v) for v in (None, -1, 0, 1)] == [True, True, False, False]
