"""docs/getting_started.md, run the way a reader runs it: its commands as the page
writes them, in order, in one shell, in an empty directory, against a MariaDB that
holds no database and no user of the sink yet (as `make setup` leaves one); each
output the page shows must appear in what its command printed.

The page marks its blocks with an HTML comment on the line before each:
``<!-- test: run -->`` a command, ``<!-- test: output -->`` what the command before
it prints (``…`` stands for any text; table borders and runs of spaces do not
count), ``<!-- test: settings -->`` the variables the reader sets for their
machine, which the test sets instead, for its own server."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devtools.mariadb import SINK_USER, MariaDB
from tests.helpers import REPO

PAGE = REPO / "docs" / "getting_started.md"
BLOCK = re.compile(
    r"^<!-- test: (settings|run|output) -->\n```[^\n]*\n(.*?)^```$", re.M | re.S
)
BORDER = re.compile(r"^[\s+\-─┌┐└┘┬┴┼├┤│|]*$")
"""A table's border line: drawn by `wal-sink status` and the mariadb client."""
STEP_MARK = "@@getting-started step {}@@"


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def page_steps(text: str) -> tuple[set[str], list[Step]]:
    """The names the settings block exports, and the commands with their outputs."""
    settings: set[str] = set()
    steps: list[Step] = []
    for kind, body in BLOCK.findall(text):
        if kind == "settings":
            for line in body.splitlines():
                if line.startswith("export "):
                    settings |= set(re.findall(r"(\w+)=", line))
        elif kind == "run":
            steps.append(Step(body))
        else:
            assert steps, "an output block before any command"
            steps[-1].expected.append(body)
    return settings, steps


def normalized(text: str) -> str:
    lines = (ln for ln in text.splitlines() if not BORDER.match(ln))
    return " ".join(re.sub(r"[│|]", " ", " ".join(lines)).split())


def shows(output: str, expected: str) -> bool:
    parts = (re.escape(p.strip()) for p in normalized(expected).split("…"))
    return re.search(r".*?".join(parts), normalized(output), re.S) is not None


def run_page(steps: list[Step], cwd: Path, env: dict[str, str]) -> None:
    """All steps in one bash (a `cd` or an export carries on to the next), stopping
    at the first command that fails; then each step's output is compared."""
    script = ["set -euo pipefail", "exec 2>&1"]
    for n, step in enumerate(steps, 1):
        script += [f"echo '{STEP_MARK.format(n)}'", step.command]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        errors="replace",
        timeout=600,
        start_new_session=True,
    )
    outputs = re.split(r"^@@getting-started step \d+@@\n", done.stdout, flags=re.M)
    ran = len(outputs) - 1
    assert done.returncode == 0, (
        f"step {ran} exited {done.returncode}:\n{steps[ran - 1].command}\n"
        f"printed:\n{outputs[-1][-3000:]}"
    )
    for n, (step, output) in enumerate(zip(steps, outputs[1:], strict=True), 1):
        for expected in step.expected:
            assert shows(output, expected), (
                f"step {n} did not print what the page shows:\n{expected}\n"
                f"it printed:\n{output[-3000:]}"
            )


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    """A server of this module's own: the page creates the user `sink`, which the
    session's server already holds for the other tests, with every privilege."""
    server = MariaDB(tmp_path_factory.mktemp("getting_started_db"))
    server.start()
    with server.root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP USER '{SINK_USER}'@'127.0.0.1'")
    yield server
    server.stop()


@pytest.fixture
def settings(empty_server: MariaDB) -> dict[str, str]:
    """The reader's settings, for the module's server."""
    venv_bin = str(REPO / ".venv" / "bin")
    return {
        "WAL_SINK_REPO": str(REPO),
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "DB_HOST": "127.0.0.1",
        "DB_PORT": str(empty_server.port),
        "DB_ADMIN": f"mariadb --socket={empty_server.socket} -u root",
        "WAL_SINK_MYSQL_PASSWORD": "a-password-of-the-page",
    }


@pytest.fixture
def reader_env(settings: dict[str, str]) -> dict[str, str]:
    return os.environ | settings


def test_getting_started_run_as_written_lands_the_rows_it_shows(
    settings, reader_env, tmp_path
):
    names, steps = page_steps(PAGE.read_text())
    assert names == set(settings), "the page's settings are not the ones set here"
    assert any("spark-submit" in s.command for s in steps), "the page runs no job"
    assert steps[-1].expected, "the page shows no rows at its end"
    run_page(steps, tmp_path, reader_env)


def test_getting_started_with_a_failing_command_stops_there_and_says_so(
    reader_env, tmp_path
):
    text = PAGE.read_text()
    first = text.index("<!-- test: run -->\n```sh\n") + len("<!-- test: run -->\n")
    first = text.index("\n", first) + 1
    broken = f"{text[:first]}false\n{text[first:]}"
    _, steps = page_steps(broken)
    with pytest.raises(AssertionError, match="step 1 exited 1"):
        run_page(steps, tmp_path, reader_env)


def test_getting_started_with_another_output_than_shown_says_so(reader_env, tmp_path):
    _, steps = page_steps(PAGE.read_text())
    shown = next(n for n, s in enumerate(steps) if s.expected)
    assert "spark-submit" not in "".join(s.command for s in steps[: shown + 1])
    steps[shown].expected = [steps[shown].expected[0] + " and more"]
    with pytest.raises(AssertionError, match=f"step {shown + 1} did not print"):
        run_page(steps[: shown + 1], tmp_path, reader_env)
