"""docs/operations.md: its Kubernetes steps run real commands on real files, its figures are
the code's."""

from __future__ import annotations

import re
import shlex
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

import pytest

from cli.contribute import cmd_contribute
from cli.demo import BENCHMARK_FILE, CONTRIBUTION_FILE, MANIFEST_FILE, cmd_demo_data
from cli.keys import cmd_keys_create
from cli.main import build_parser
from cli.operate import cmd_token
from cli.upload import cmd_upload
from pipeline.core.db import make_engine
from tests.deploy.support import OPERATIONS, ROOT, all_documents, containers, of_kind

# Top-level folders of the repository: a code span starting with one names a repository path.
REPO_FOLDERS = {path.name for path in ROOT.iterdir() if path.is_dir() and path.name[0] != "."}


def section(title: str) -> str:
    text = OPERATIONS.read_text()
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/operations.md has a '## {title}' section"
    return match[1]


def code(text: str) -> list[str]:
    """Fenced blocks' lines and inline code spans (a span's line breaks read as spaces)."""
    blocks = re.findall(r"^\s*```[^\n]*\n(.*?)^\s*```", text, re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    prose = re.sub(r"^\s*```[^\n]*\n.*?^\s*```", "", text, flags=re.M | re.S)
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return lines + spans


def marketplace_commands(text: str) -> list[str]:
    """Every `marketplace SUBCOMMAND …` where a command starts in the code of `text` (a line, a
    span, `$(`, after `&&`, `;` or `|`), up to a pipe, `)` or comment."""
    start = r"(?:^|\$\(|&&|;|\|)\s*"
    found = []
    for snippet in code(text):
        found += re.findall(start + r"marketplace (?=[a-z])([^|)`;&#]*)", snippet)
    return [command.strip() for command in found]


STEPS = section("Kubernetes: from an empty cluster to a first rewarded contribution")


def parsed_steps() -> list[Namespace]:
    parser = build_parser()
    parsed = []
    for command in dict.fromkeys(marketplace_commands(STEPS)):  # each distinct command once
        try:
            parsed.append(parser.parse_args(shlex.split(command)))
        except SystemExit:
            pytest.fail(f"`marketplace {command}` in docs/operations.md does not parse")
    return parsed


def test_every_marketplace_command_of_the_steps_parses() -> None:
    handlers = {args.handler for args in parsed_steps()}
    # The steps go from a token to a rewarded contribution with the CLI's own commands.
    expected = {cmd_token, cmd_keys_create, cmd_demo_data, cmd_upload, cmd_contribute}
    assert expected <= handlers, [handler.__module__ for handler in expected - handlers]


def the_one(parsed: list[Namespace], handler: Callable[..., int]) -> Namespace:
    [args] = [args for args in parsed if args.handler is handler]
    return args


def test_the_steps_use_the_files_demo_data_writes() -> None:
    parsed = parsed_steps()
    demo = the_one(parsed, cmd_demo_data)
    upload = the_one(parsed, cmd_upload)
    contribute = the_one(parsed, cmd_contribute)
    folder = Path(demo.dir)
    assert Path(upload.file) == folder / BENCHMARK_FILE
    assert Path(contribute.file) == folder / CONTRIBUTION_FILE
    assert Path(contribute.manifest) == folder / MANIFEST_FILE
    assert upload.model_id == contribute.model_id == demo.model


def test_every_file_a_step_reads_is_written_by_a_step_or_in_the_repository() -> None:
    parsed = parsed_steps()
    written = {
        Path(args.dir) / name
        for args in parsed
        if args.handler is cmd_demo_data
        for name in (BENCHMARK_FILE, CONTRIBUTION_FILE, MANIFEST_FILE)
    }
    read = {
        Path(value)
        for args in parsed
        for key in ("file", "manifest")
        if isinstance(value := getattr(args, key, None), str)
    }
    assert read, "the steps read files"
    missing = sorted(str(path) for path in read - written if not (ROOT / path).is_file())
    assert missing == [], f"files no step writes and the repository does not hold: {missing}"


def test_the_cli_runs_where_the_settings_are() -> None:
    # `kubectl run --image=…` starts a pod without the ConfigMap and Secret; the steps use a
    # container of a Deployment that reads both.
    assert "kubectl run" not in STEPS
    execs = re.findall(r"kubectl .*?exec -it deploy/(\S+) -c (\S+)", " ".join(STEPS.split()))
    assert execs, "the steps open a shell in a pod"
    sources = {
        (doc["kind"], doc["metadata"]["name"])
        for doc in all_documents()
        if doc["kind"] in {"ConfigMap", "Secret"}
    }
    for deployment, name in execs:
        [doc] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == deployment]
        [container] = [c for c in containers(doc) if c["name"] == name]
        read = {
            ("ConfigMap", source["configMapRef"]["name"])
            if "configMapRef" in source
            else ("Secret", source["secretRef"]["name"])
            for source in container["envFrom"]
        }
        assert read == sources


def test_marketplace_commands_are_found_in_spans_and_blocks() -> None:
    text = (
        "Run `marketplace db\n   upgrade`, not `marketplace-api` or `kubectl -n marketplace get`.\n"
        "   ```sh\n   export T=$(marketplace token --user a | tail -1)\n   ```\n"
    )
    assert marketplace_commands(text) == ["token --user a", "db upgrade"]


def repository_paths(text: str) -> set[str]:
    paths = set()
    for snippet in code(text):
        # A path broken over two lines of a span: `pipeline/evaluation/ fit_engine.py`.
        for word in re.sub(r"/ (?=\w)", "/", snippet).split():
            word = word.strip("\"'(),;:").split("::")[0].split("#")[0]
            # A file (a suffix) or a folder (a trailing slash); deploy/NAME is a kubectl target.
            named = "." in word.rsplit("/", 1)[-1] or word.endswith("/")
            if "/" in word and word.split("/")[0] in REPO_FOLDERS and named:
                paths.add(word)
    return paths


def test_every_repository_path_the_doc_names_exists() -> None:
    paths = repository_paths(OPERATIONS.read_text())
    assert "deploy/k8s/trainer-sandbox.yaml" in paths
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert missing == [], f"docs/operations.md names files that do not exist: {missing}"


def test_the_connection_figures_are_the_engines() -> None:
    # A PostgreSQL engine connects lazily: its pool settings can be read without a server.
    engine = make_engine("postgresql+psycopg://user:pw@127.0.0.1:9/marketplace")
    size, overflow = engine.pool.size(), engine.pool._max_overflow  # type: ignore[attr-defined]
    engine.dispose()
    text = " ".join(section("Several API processes").split())
    pattern = r"own pool \((\d+) \+ (\d+) overflow[^)]*\): N workers open up to (\d+) × N"
    match = re.search(pattern, text)
    assert match, "the doc states each worker's pool"
    assert (int(match[1]), int(match[2]), int(match[3])) == (size, overflow, size + overflow)
