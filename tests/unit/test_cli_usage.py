"""The click layer alone (CliRunner, no MySQL, no WAL): usage errors exit 2 before
anything is read, every command's help shows an example, the config's JSON Schema
describes every key."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from wal_sink.cli.commands import main

COMMANDS = [
    "init-db",
    "status",
    "recover",
    "replay",
    "purge",
    "inspect",
    "quarantine-batch",
    "quarantine",
    "quarantine list",
    "quarantine retry",
    "quarantine export",
    "follow",
]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_has_an_example(command):
    r = run("-c", "unused.toml", *command.split(), "--help")
    assert r.exit_code == 0 and "Example: wal-sink -c" in r.output


@pytest.mark.parametrize(
    "args, says",
    [
        (["purge"], "give one of --before N or --older-than DURATION, and/or"),
        (["purge", "--before", "1", "--older-than", "1d"], "give one of"),
        (["purge", "--quarantine-older-than", "soon"], "is not a duration"),
        (["purge", "--older-than", "soon"], "is not a duration"),
        (["replay", "--from", "3", "--to", "1"], "--from 3 is after --to 1"),
        (["inspect"], "give a batch id, or --quarantine"),
        (["replay", "--from", "-1", "--to", "1"], "-1 is not in the range"),
        (["quarantine-batch"], "Missing argument 'BATCH_ID'"),
        (["quarantine", "export"], "Missing option '--to'"),
        (["quarantine", "retry", "--batch", "-1"], "-1 is not in the range"),
        (["quarantine", "list", "--limit", "0"], "0 is not in the range"),
    ],
)
def test_usage_errors_exit_two_before_reading_anything(args, says):
    r = run("-c", "no-such-file.toml", *args)
    assert r.exit_code == 2 and says in r.output, r.output


def test_commands_without_a_config_are_usage_errors():
    r = run("status")
    assert r.exit_code == 2 and "-c FILE" in r.output


def test_config_schema_describes_every_key():
    r = run("config-schema")
    assert r.exit_code == 0
    schema = json.loads(r.output)
    sections = schema["properties"]
    assert set(sections) == {
        "sink",
        "wal",
        "mysql",
        "source",
        "transform",
        "cdc",
        "job",
        "storage",
        "housekeeping",
    }
    for name, definition in schema["$defs"].items():
        assert definition["additionalProperties"] is False, name
        for key, prop in definition["properties"].items():
            assert prop.get("description"), f"{name}.{key} has no description"
    mysql = schema["$defs"]["MysqlConfig"]["properties"]
    assert mysql["merge"]["additionalProperties"]["enum"] == [
        "overwrite",
        "add",
        "keep",
    ]
    assert mysql["ack_table"]["default"] == "wal_sink_ack"
    wal = schema["$defs"]["WalConfig"]["properties"]
    assert "config file's directory" in wal["path"]["description"]


def test_config_schema_with_a_config_validates_it_and_refuses_an_invalid_one(
    tmp_path,
):
    good = tmp_path / "good.toml"
    good.write_text(
        "[sink]\nid = 's'\n[wal]\npath = 'w'\n"
        "[mysql]\nurl = 'mysql+pymysql://u@h/d'\ntable = 't'\nkey = ['k']\n"
    )
    r = run("-c", str(good), "config-schema")
    assert r.exit_code == 0 and f"config {good} is valid" in r.stderr, r.output
    assert "properties" in json.loads(r.stdout)
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text() + "colour = 'red'\n")
    r = run("-c", str(bad), "config-schema")
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.startswith("error: unknown config key 'mysql.colour'"), r.stderr
    assert r.stderr.count("\n") == 1


def test_a_tables_title_is_printed_whole_on_one_line_at_any_width():
    """A rich title is folded to the table's width: the path and counts in it would be
    split across lines, and a grep or a copy of them would miss."""
    from io import StringIO

    from rich.console import Console

    from wal_sink.cli.base import show
    from wal_sink.cli.render import entries_table

    path = "/data/[prod]/" + "a-long-directory-name/" * 5 + "wal_quarantine"
    printed = StringIO()
    show(entries_table(path, [], 0), Console(file=printed, width=40))
    lines = printed.getvalue().splitlines()
    assert lines[0] == f"quarantine {path}: 0 entries, showing 0"
    assert lines[1].startswith("┏")  # the table follows, without its title
