"""An API process's memory allocators: set once, at start-up (`api.app.create_app`).

A benchmark upload is profiled and fingerprinted by two threads at once
(`pipeline.intake.streamed_fingerprints`), both allocating (Arrow buffers, NumPy arrays). glibc's
malloc gives a thread that finds an arena locked an arena of its own (up to eight per core) and
hands little of an arena's freed memory back; Arrow's own pools keep freed pages too; and glibc's
adaptive mmap threshold soon puts the 1 MiB read blocks on the heap, where freeing them does not
lower the RSS. Measured on the 480 MiB upload of `bench/upload.py` (docs/benchmarks.md): 561 MB
peak with glibc's defaults and Arrow's mimalloc pool, 384 MB with these settings (and `serve`'s
seeding in a child process). Set once per API process, before its first request:

- `MALLOC_ARENA_MAX` (default 2): glibc's arena limit, `mallopt(M_ARENA_MAX)`. It binds the
  arenas created afterwards (glibc reads the environment variable of that name only when a
  process starts). 0 keeps glibc's default.
- `MALLOC_MMAP_THRESHOLD_BYTES` (default 256 KiB): `mallopt(M_MMAP_THRESHOLD)`; blocks from this
  size up are mapped and unmapped, so a freed read block leaves the RSS (about 1 CPU second of
  page faults per 480 MiB upload). 0 keeps glibc's adaptive threshold.
- After each upload (`release_free_memory`, called when an upload's intake closes), glibc is
  asked to hand the free pages inside its heaps back (`malloc_trim`): freed memory otherwise
  stays in the process, and what start-up and an upload leave there raise the next upload's
  peak (on `bench/upload.py`'s 480 MiB upload after its small warm-up upload: 379 MB peak
  instead of 407, the server 313 MB before it instead of 335).
- `ARROW_DEFAULT_MEMORY_POOL` (default `system`): the pool Arrow allocates from; `system` is
  malloc, so the settings above hold for Arrow's buffers too; `jemalloc` and `mimalloc` are
  Arrow's own pools (when the build has them).

The malloc settings have no effect off glibc.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import threading

import pyarrow as pa

from pipeline.core.config import Settings

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
M_ARENA_MAX = -8
_POOLS = {
    "system": pa.system_memory_pool,
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
}
_lock = threading.Lock()


def configure_process_memory(settings: Settings) -> None:
    """Apply the settings to this process (idempotent; later calls change what they name)."""
    with _lock:
        if _is_glibc():
            _mallopt(M_ARENA_MAX, settings.malloc_arena_max)
            _mallopt(M_MMAP_THRESHOLD, settings.malloc_mmap_threshold_bytes)
        pool = settings.arrow_default_memory_pool
        try:
            pa.set_memory_pool(_POOLS[pool]())
        except NotImplementedError:  # a pyarrow built without that allocator
            log.warning("Arrow has no %s memory pool; keeping %s", pool, _current_pool())


def release_free_memory() -> None:
    """Give the free pages of glibc's heaps back to the system (a few milliseconds; no-op off
    glibc). Arrow's system pool is malloc, so its freed buffers are among them."""
    if _is_glibc():
        ctypes.CDLL(None).malloc_trim(0)


def _mallopt(option: int, value: int) -> None:
    if value and ctypes.CDLL(None).mallopt(option, value) != 1:
        log.warning("mallopt(%d, %d) failed", option, value)


def _is_glibc() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _current_pool() -> str:
    return str(pa.default_memory_pool().backend_name)
