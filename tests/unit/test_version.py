"""One version: the package's, CHANGELOG.md's newest entry, the sink's tables'
(the newest upgrade script in sql/) and the one the docs say this is agree, and
every version the tables' code names has its upgrade script and its entry."""

from __future__ import annotations

import re
from configparser import ConfigParser
from pathlib import Path

import wal_sink
from wal_sink.mysql.tables import ADDED_ACK_COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def changelog_versions() -> list[str]:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return re.findall(r"^## (\d+\.\d+(?:\.\d+)?)$", text, re.MULTILINE)


def upgrade_versions() -> list[str]:
    found = (p.name for p in (ROOT / "sql").glob("upgrade_*.sql"))
    return sorted((n[len("upgrade_") : -len(".sql")] for n in found), key=minor)


def test_the_package_changelog_and_tables_name_one_version():
    setup = ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["version"] == "attr: wal_sink.__version__"
    newest, *earlier = changelog_versions()
    assert newest == wal_sink.__version__
    assert minor(upgrade_versions()[-1]) == minor(wal_sink.__version__)
    assert [minor(v) for v in earlier] == sorted(map(minor, earlier), reverse=True)


def test_every_tables_version_has_its_upgrade_script_and_changelog_entry():
    entries = {minor(v) for v in changelog_versions()}
    scripts = {minor(v) for v in upgrade_versions()}
    named = {minor(version) for _, version in ADDED_ACK_COLUMNS.values()}
    assert named <= scripts, named - scripts
    assert scripts <= entries, scripts - entries


def test_the_docs_name_the_packages_version():
    said = [
        version
        for page in sorted((ROOT / "docs").glob("*.md"))
        for version in re.findall(
            r"This is wal_sink (\d+\.\d+\.\d+)", page.read_text(encoding="utf-8")
        )
    ]
    assert said, "no page says which version this is"
    assert set(said) == {wal_sink.__version__}
