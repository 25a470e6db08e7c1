"""conf/alerts.yml under promtool, Prometheus's own rule checker: the file loads,
and tests/alerts/wal_sink_test.yml's series make each alert fire when it should
and stay quiet when it should not. `make setup` puts promtool in .tools/ (from
Debian's prometheus package) when it is not on PATH."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.helpers import REPO

RULES = REPO / "conf" / "alerts.yml"
RULE_TESTS = REPO / "tests" / "alerts" / "wal_sink_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or REPO / ".tools" / "promtool"
    if not shutil.which(str(found)):
        pytest.fail("promtool is missing: run `make setup`", pytrace=False)
    return str(found)


def alert_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def run(promtool: str, *args: str) -> str:
    done = subprocess.run(
        [promtool, *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_check_of_the_rules_file_succeeds(promtool):
    assert f"SUCCESS: {len(alert_names())} rules found" in run(
        promtool, "check", "rules", str(RULES)
    )


def test_promtool_rule_tests_of_every_alert_pass(promtool):
    assert "SUCCESS" in run(promtool, "test", "rules", str(RULE_TESTS))


def test_rule_tests_cover_every_alert_firing_and_quiet():
    alerts = set(alert_names())
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    firing = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts - firing == set(), "never seen firing"
    assert alerts - quiet == set(), "never seen quiet"
