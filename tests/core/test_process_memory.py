"""An API process's allocator settings (pipeline/core/process_memory.py), applied by create_app."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from pipeline.core import process_memory
from pipeline.core.config import Settings


@pytest.fixture(autouse=True)
def arrow_pool_restored() -> Iterator[None]:
    pool = pa.default_memory_pool()
    yield
    pa.set_memory_pool(pool)


class _Libc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.trims: list[int] = []

    def mallopt(self, option: int, value: int) -> int:
        self.calls.append((option, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> _Libc:
    fake = _Libc()
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: fake)
    monkeypatch.setattr(process_memory, "_is_glibc", lambda: True)
    return fake


def test_the_defaults_cap_glibcs_arenas_map_large_blocks_and_use_arrows_system_pool(
    libc: _Libc,
) -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    process_memory.configure_process_memory(Settings())
    assert libc.calls == [
        (process_memory.M_ARENA_MAX, 2),
        (process_memory.M_MMAP_THRESHOLD, 256 * 1024),
    ]
    assert pa.default_memory_pool().backend_name == "system"


def test_zero_keeps_glibcs_own_choice_and_the_pool_is_a_setting(libc: _Libc) -> None:
    settings = Settings(
        malloc_arena_max=0, malloc_mmap_threshold_bytes=0, arrow_default_memory_pool="mimalloc"
    )
    process_memory.configure_process_memory(settings)
    assert libc.calls == []
    assert pa.default_memory_pool().backend_name == "mimalloc"


def test_a_bad_value_is_refused_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.core.config import ConfigError, load_settings

    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "tcmalloc")
    with pytest.raises(ConfigError, match="ARROW_DEFAULT_MEMORY_POOL"):
        load_settings()


def test_create_app_applies_them_before_serving(
    make_settings: Callable[..., Settings], libc: _Libc
) -> None:
    from api.app import create_app

    app: Any = create_app(make_settings(malloc_arena_max=3))
    try:
        assert (process_memory.M_ARENA_MAX, 3) in libc.calls
        assert pa.default_memory_pool().backend_name == "system"
    finally:
        app.state.db.dispose()


def test_free_memory_goes_back_to_the_system_after_an_upload(libc: _Libc, tmp_path: Any) -> None:
    from pipeline.intake.receiving import DatasetIntake

    with DatasetIntake(tmp_path, max_bytes=1024, pii=None) as intake:
        intake.write(b"a,b\n1,2\n")
        intake.finish()
        assert libc.trims == []
    assert libc.trims == [0]  # all free pages, none kept at the heaps' tops
