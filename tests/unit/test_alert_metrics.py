"""Every metric conf/alerts.yml's expressions name is one the sink serves
(wal_sink/metrics.py), as Prometheus exposes it: a renamed metric fails here
rather than leaving an alert that never fires."""

from __future__ import annotations

import re

import yaml

from tests.helpers import REPO
from wal_sink.metrics import SinkMetrics

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


def test_alert_expressions_name_only_metrics_the_sink_serves():
    served = {
        family.name + suffix
        for family in SinkMetrics("s").registry.collect()
        for suffix in SUFFIXES[family.type]
    }
    groups = yaml.safe_load((REPO / "conf" / "alerts.yml").read_text())["groups"]
    named = {
        name
        for group in groups
        for rule in group["rules"]
        for name in re.findall(r"\bwal_sink_\w+", rule["expr"])
    }
    assert named, "no metric found in the rules"
    assert named - served == set()
