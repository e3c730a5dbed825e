"""README's Quick start, run as written (issue 11), so it cannot drift from what the code does.

The test reads the four marked blocks of README.md: terminal 1 (`make run`), the banner it
prints, terminal 2 and the owner's model after it (`$ command` lines, each followed by its
expected output). It starts
`marketplace dev` (what `make run` runs once `.venv` exists) on free ports in a fresh folder
that has `.venv` linked in, as a clone would, then runs the terminal-2 commands there in one
bash session and compares each command's output with the README's, line by line:

- `…` in an expected line stands for any text; a line of just `…` for any lines;
- the output may hold more lines than the README shows, but the README's must all appear, in
  order; the status lines a job passes through on its way (`job …: queued …`, `validating`,
  `evaluating`) depend on timing and may be missing;
- the README's addresses (`127.0.0.1:8000`, `:3000`) are replaced by the test's ports, and
  `MARKETPLACE_URL` is set as the banner asks when the port is not 8000;
- the server runs with a 1 s debounce window and arrival poll instead of `marketplace dev`'s
  10 s and 5 s (set the way the banner says, EVALUATION_DEBOUNCE_WINDOW_SECONDS and
  ARRIVAL_POLL_INTERVAL_SECONDS), so each contribution waits seconds less; the banner's line
  is compared with these, and a fast test compares the README's banner with the defaults;
- Ctrl-C gives Dagster's processes 5 s (SHUTDOWN_GRACE_SECONDS) instead of 20 before they are
  cut off: the test checks what is printed until then, not how gracefully Dagster stops.

It also checks that the start is quiet: no Dagster DEBUG events, no request log, no warning
about dagster.yaml or a superseded command.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
START_TIMEOUT = 120
STEPS_TIMEOUT = 480
TIMING_DEPENDENT = re.compile(r"^job …: (queued|validating|evaluating)\b")
# The waits of the run, shorter than `marketplace dev`'s defaults (DEV_DEBOUNCE_SECONDS and
# DEV_ARRIVAL_POLL_SECONDS, which the README shows).
TEST_DEBOUNCE_SECONDS = 1
TEST_ARRIVAL_POLL_SECONDS = 1
TEST_SHUTDOWN_GRACE_SECONDS = 5
STEP_MARK = "@@quickstart-step {}@@"


def readme_block(name: str) -> str:
    """The fenced block right after `<!-- quickstart:NAME -->` in README.md."""
    text = README.read_text(encoding="utf-8")
    match = re.search(
        rf"<!-- quickstart:{re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", text, re.DOTALL
    )
    assert match, f"README.md has no quickstart:{name} block"
    return match.group(1)


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def console_steps(block: str) -> list[Step]:
    steps: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:]))
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1].expected.append(line)
    return steps


def line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.rstrip().split("…")))


def mismatch(expected: list[str], actual: list[str], optional: re.Pattern[str] | None) -> str:
    """Why `actual` does not show `expected` (see the module docstring); "" when it does."""
    position = 0
    for line in expected:
        if line.strip() == "…":
            continue
        pattern = line_pattern(line)
        found = next(
            (i for i in range(position, len(actual)) if pattern.fullmatch(actual[i].rstrip())),
            None,
        )
        if found is None:
            if optional is not None and optional.match(line):
                continue
            return f"expected line not found (in order): {line!r}"
        position = found + 1
    return ""


def test_matching_rules() -> None:
    out = ["job 12: queued · waiting", "job 12: rewarded · 3 tokens", "total: 3"]
    assert mismatch(["job …: rewarded · … tokens", "total: 3"], out, None) == ""
    assert mismatch(["…", "total: 3"], out, None) == ""
    assert mismatch(["total: 3", "job …: rewarded …"], out, None) != ""  # order matters
    assert mismatch(["job …: evaluating", "total: 3"], out, TIMING_DEPENDENT) == ""
    assert mismatch(["job …: evaluating"], out, None) != ""
    assert mismatch(["total: 4"], out, None) == "expected line not found (in order): 'total: 4'"


def test_readme_quick_start_blocks_parse() -> None:
    assert readme_block("terminal-1").splitlines()[-1] == "make run"
    steps = console_steps(readme_block("terminal-2"))
    commands = [s.command.split()[0:2] for s in steps]
    assert ["marketplace", "demo-data"] in commands and ["curl", "-s"] in commands
    assert len(steps) + 2 <= 12  # "about ten commands" from the clone on


def test_banner_demo_commands_are_the_quick_starts() -> None:
    from cli.devmode import dev_banner
    from pipeline.core.config import Settings

    banner = dev_banner(
        Settings(marketplace_data_dir=Path(".marketplace")),
        host="127.0.0.1",
        port=8000,
        dagster_port=3000,
        environ={},
    )
    quick_start = readme_block("terminal-2")
    demo = banner.split("Try the demo (README, Quick start):\n", 1)[1].splitlines()[:-1]
    assert demo
    for line in demo:
        assert f"$ {line.strip()}\n" in quick_start, line


def test_readme_banners_waits_are_marketplace_devs_defaults() -> None:
    """The README's banner says how soon evaluation starts with `marketplace dev`'s defaults
    (the slow test runs with shorter ones: `with_test_waits`)."""
    from cli.devmode import dev_banner, dev_settings_environment
    from pipeline.core.config import load_settings

    defaults = dev_settings_environment({}, None)
    settings = load_settings(**{name.lower(): int(value) for name, value in defaults.items()})
    banner = dev_banner(settings, host="127.0.0.1", port=8000, dagster_port=3000, environ={})
    waits = [line for line in banner.splitlines() if "debounce" in line.lower()]
    assert len(waits) == 3 and "10 s" in waits[0]
    readme = readme_block("banner").splitlines()
    for line in waits:
        assert line in readme


def with_test_waits(line: str) -> str:
    """A README banner line as the test's server prints it (its shorter waits)."""
    from cli.devmode import DEV_ARRIVAL_POLL_SECONDS, DEV_DEBOUNCE_SECONDS

    return line.replace(
        f"debounce window {DEV_DEBOUNCE_SECONDS} s, arrival sensor every "
        f"{DEV_ARRIVAL_POLL_SECONDS} s",
        f"debounce window {TEST_DEBOUNCE_SECONDS} s, arrival sensor every "
        f"{TEST_ARRIVAL_POLL_SECONDS} s",
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environment() -> dict[str, str]:
    """This process's environment without the variables a newcomer would not have set."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("MARKETPLACE_", "DAGSTER_", "DATASET_", "SERVICE_", "ENABLE_")) or (
            name
            in {
                "DATABASE_URL",
                "JWT_SECRET",
                "ADMIN_TOKEN",
                "REDIS_URL",
                "S3_ENDPOINT_URL",
                "EVALUATION_DEBOUNCE_WINDOW_SECONDS",
                "ARRIVAL_POLL_INTERVAL_SECONDS",
                "VIRTUAL_ENV",
            }
        ):
            env.pop(name)
    env["PYTHONUNBUFFERED"] = "1"  # output in the order a terminal would show it
    return env


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"marketplace dev exited early:\n{log.read_text()}"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {START_TIMEOUT} s:\n{log.read_text()}")


def run_steps(steps: list[Step], cwd: Path, env: dict[str, str]) -> list[list[str]]:
    """Run the commands in one bash session; each command's output lines (stdout + stderr)."""
    script = ["set -e"]
    for index, step in enumerate(steps):
        script += [f"printf '\\n{STEP_MARK.format(index)}\\n'", step.command]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=STEPS_TIMEOUT,
    )
    output = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"a quick start command failed:\n{output[-6000:]}"
    parts = re.split(r"\n" + re.escape(STEP_MARK).replace(r"\{\}", r"\d+") + r"\n", output)
    assert len(parts) == len(steps) + 1, output[-6000:]
    return [part.splitlines() for part in parts[1:]]


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
def test_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    assert readme_block("terminal-1").splitlines()[-1] == "make run"
    workdir = tmp_path / "marketplace"
    workdir.mkdir()
    # A clone has `.venv` after `make run`; this one shares the test's virtualenv.
    (workdir / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    api_port, dagster_port = free_port(), free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    env = {
        **clean_environment(),
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS": str(TEST_DEBOUNCE_SECONDS),
        "ARRIVAL_POLL_INTERVAL_SECONDS": str(TEST_ARRIVAL_POLL_SECONDS),
        "SHUTDOWN_GRACE_SECONDS": str(TEST_SHUTDOWN_GRACE_SECONDS),
    }
    log = tmp_path / "dev.log"
    python = str(workdir / ".venv" / "bin" / "python")
    with log.open("wb") as out:
        dev = subprocess.Popen(
            [python, "-m", "cli.main", "dev", "--port", str(api_port),
             "--dagster-port", str(dagster_port)],
            cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    started = time.monotonic()
    try:
        wait_for(f"{api_url}/api/models", dev, log)
        wait_for(f"http://127.0.0.1:{dagster_port}/server_info", dev, log)

        # Terminal 2, then the owner's model in the same session.
        steps = console_steps(readme_block("terminal-2"))
        steps += console_steps(readme_block("owner-model"))
        for step in steps:
            step.command = step.command.replace("http://127.0.0.1:8000", api_url)
        outputs = run_steps(steps, workdir, {**env, "MARKETPLACE_URL": api_url})
        for step, lines in zip(steps, outputs, strict=True):
            problem = mismatch(step.expected, lines, TIMING_DEPENDENT)
            assert not problem, f"$ {step.command}\n{problem}\nactual output:\n" + "\n".join(lines)
        contribute = next(o for s, o in zip(steps, outputs, strict=True) if "--wait" in s.command)
        assert any(re.match(r"job \S+: queued · waiting for ", line) for line in contribute)
        elapsed = time.monotonic() - started
    finally:
        dev.send_signal(signal.SIGINT)
        try:
            dev.wait(timeout=40)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()

    shown = log.read_text(errors="replace").splitlines()
    banner = [
        with_test_waits(line)
        .replace("127.0.0.1:8000", f"127.0.0.1:{api_port}")
        .replace("127.0.0.1:3000", f"127.0.0.1:{dagster_port}")
        for line in readme_block("banner").splitlines()
    ]
    problem = mismatch(banner, shown, None)
    assert not problem, problem + "\nmarketplace dev printed:\n" + "\n".join(shown)
    # Quiet: only what an operator needs.
    noise = [
        line
        for line in shown
        if " DEBUG " in line
        or "dagster.yaml" in line
        or "superseded" in line
        or '"GET /' in line
        or '"POST /' in line
    ]
    assert noise == [], noise
    # About 60 lines on a quiet machine; a loaded one spreads the arrivals over more sensor
    # ticks, each of which logs one summary line, so the bound leaves room for that.
    assert len(shown) < 80, "\n".join(shown)
    print(f"quick start, from `marketplace dev` to the rewards: {elapsed:.0f} s")
