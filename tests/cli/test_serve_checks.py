"""What `marketplace serve` refuses to start with (issue 21 row 10, issue 19): guessable secrets,
and several workers whose rate limits would not be shared."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from cli.main import main
from cli.operate import serve_problems
from pipeline.core.config import Settings, get_settings
from pipeline.core.secret_strength import MIN_SECRET_BITS, estimated_bits, secret_problem

REPO = Path(__file__).resolve().parents[2]


def serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in {"JWT_SECRET", "ADMIN_TOKEN"}}
    environment.pop("REDIS_URL", None)
    environment.update(MARKETPLACE_DATA_DIR=str(tmp_path / "data"), **env)
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", "--port", "1", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_refuses_well_known_secrets_and_names_them(tmp_path: Path) -> None:
    done = serve(tmp_path, JWT_SECRET="secret", ADMIN_TOKEN="x")
    assert done.returncode == 2
    assert "JWT_SECRET has 6 characters; at least 32 are required" in done.stderr
    assert "ADMIN_TOKEN has 1 characters" in done.stderr
    assert "secrets.token_urlsafe(32)" in done.stderr  # how to make a good one
    assert not (tmp_path / "data").exists()  # refused before touching the store


@pytest.fixture
def in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str]]]:
    """`marketplace serve ARGS` in this process with the given environment: (status, output)."""

    def run(*args: str, **env: str) -> tuple[int, str]:
        for name in ("JWT_SECRET", "ADMIN_TOKEN", "REDIS_URL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(tmp_path / "data"))
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()
        status = main(["serve", "--port", "1", *args])
        out, err = capsys.readouterr()
        return status, out + err

    yield run
    get_settings.cache_clear()


def test_serve_refuses_a_long_but_guessable_secret_without_showing_it(
    in_process: Callable[..., tuple[int, str]],
) -> None:
    guessable = "password" * 5
    status, output = in_process(JWT_SECRET=guessable)
    assert status == 2
    assert "JWT_SECRET looks guessable" in output
    assert guessable not in output


def test_serve_refuses_several_workers_without_redis(
    in_process: Callable[..., tuple[int, str]],
) -> None:
    status, output = in_process("--workers", "2")
    assert status == 2
    assert "--workers 2 needs REDIS_URL" in output


@pytest.mark.parametrize("secret", ["a" * 64, "ab" * 32, "0123456789" * 4, "correct horse battery"])
def test_typed_secrets_fall_below_the_floor(secret: str) -> None:
    assert secret_problem("JWT_SECRET", secret) is not None


def test_random_32_byte_secrets_always_pass() -> None:
    for _ in range(500):
        assert estimated_bits(secrets.token_urlsafe(32)) >= MIN_SECRET_BITS
        assert estimated_bits(secrets.token_hex(32)) >= MIN_SECRET_BITS


def test_unset_secrets_and_one_worker_need_nothing(tmp_path: Path) -> None:
    settings = Settings(marketplace_data_dir=tmp_path)
    assert serve_problems(settings, workers=1) == []
    strong = Settings(
        marketplace_data_dir=tmp_path,
        jwt_secret=SecretStr(secrets.token_urlsafe(32)),
        admin_token=SecretStr(secrets.token_urlsafe(32)),
        redis_url="redis://127.0.0.1:6379/0",
    )
    assert serve_problems(strong, workers=4) == []
