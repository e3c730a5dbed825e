"""A seeded slice of `bench/fuzz_uploads.py` against a real `marketplace serve` (issue 33).

80 mutated CSV and Parquet files (byte flips, truncations, footer and page-header edits,
encryption and codec fields, huge declared sizes, files past the size limit), 64 one after
another and 16 four at once: every answer is 201, 400, 413 or 422 with the documented body,
within the deadline; nothing is stored after a refusal; the server's process lives throughout
and leaves no temp folder. The full run (2,000 files) is the benchmark's.
"""

from __future__ import annotations

import pytest

from bench._server import embedded_server
from bench.fuzz_uploads import LIMIT_BYTES, Target, run
from bench.upload import create_key

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("fuzz-uploads")]

FILES = 80
SEED = 33


def test_a_seeded_slice_of_hostile_uploads_never_harms_the_server() -> None:
    with embedded_server(extra_env={"UPLOAD_MAX_BYTES": str(LIMIT_BYTES)}) as server:
        target = Target(server, create_key(server.url))
        report = run(target, FILES, SEED, concurrency=4, baseline=False)
    assert report.failures == []
    assert report.files == FILES
    # The slice reaches every kind of answer, so each check above was exercised.
    assert {"201", "400", "413", "422"} <= set(report.outcomes), report.outcomes
