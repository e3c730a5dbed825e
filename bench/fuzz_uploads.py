"""Benchmark: thousands of mutated CSV and Parquet files uploaded; the server never goes down.

    python bench/fuzz_uploads.py                  # 2,000 files, own server on a temp store
    python bench/fuzz_uploads.py --files 300 --seed 7

Starts `marketplace serve` on a temp embedded store (`bench/_server.py`) with a 1 MiB upload
limit, then uploads to `POST /api/v1/benchmarks/upload/1` (the demo model):
  baseline: every seed file unmutated (`bench/_mutations.py`: the vendored parquet-testing
            files, scikit-learn's data sets as CSV and Parquet), one after another;
  fuzz:     `--files` mutated files (seeded: the same files for the same `--seed`), four
            fifths one after another, the rest `--concurrency` at once.
Each answer is checked: the status is 201, 400, 413 or 422; a 201 carries the stored object, a
refusal exactly `{"detail": "<text>"}`; it came within `DEADLINE_SECONDS`; after a refusal
(one after another) neither an object nor a dataset version was added, and after the
concurrent part the objects added are as many as its 201s; the server's process is the same
one and answers /healthz; no upload temp folder is left. Anything else is a failure.

Prints the counts per outcome, each failure (file number, seed, mutations, what was wrong), the
seconds per upload of the baseline and the fuzz, what reading a Parquet file in a child first
costs (a new 1,000,000-row file of the demo model's shape: the child's read against the upload
profile's own, in process), and last `ratio:` = failures / files (goal 0).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._mutations import Mutant, mutants, seeds
from bench._server import Server, embedded_server
from bench.upload import create_key

LIMIT_BYTES = 1024 * 1024
DEADLINE_SECONDS = 30.0
EXPECTED = {201, 400, 413, 422}
URL = "/api/v1/benchmarks/upload/1"


@dataclass
class Report:
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    files: int = 0
    reader_deaths: int = 0
    baseline: Report | None = None

    def fail(self, item: Mutant, what: str) -> None:
        self.failures.append(f"#{item.index} {item.seed} {'+'.join(item.mutations)}: {what}")


def seed_files() -> list[Mutant]:
    """The seeds themselves, unmutated, as the baseline's files (numbered below 0)."""
    return [
        Mutant(-1 - i, s.name, (), f"seed{i}.{s.kind}", s.data, s.target, s.inputs)
        for i, s in enumerate(seeds())
    ]


class Target:
    """The server under test: where to send, and what it has stored."""

    def __init__(self, server: Server, key: str) -> None:
        assert server.data_dir is not None and server.pid is not None
        self.server = server
        self.key = key
        self.objects = server.data_dir / "objects"
        self.tmp = server.data_dir / "tmp" / "uploads"
        self.database = server.data_dir / "marketplace.db"
        self.down = False

    def stored(self) -> tuple[int, int]:
        """(object files, dataset versions) in the store."""
        files = (
            sum(1 for p in self.objects.rglob("*") if p.is_file()) if self.objects.exists() else 0
        )
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, timeout=30) as db:
            (versions,) = db.execute("select count(*) from dataset_versions").fetchone()
        return files, int(versions)

    def alive(self) -> bool:
        """The server's own process is still there (not a zombie) and answers."""
        try:
            state = Path(f"/proc/{self.server.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":
            return False
        try:
            return httpx.get(f"{self.server.url}/healthz", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def send(self, client: httpx.Client, item: Mutant) -> tuple[int | None, object, float]:
        """(status or None, JSON body or the error's text, seconds)."""
        fields = {"target_column": item.target, "allow_pii": "false"}
        if item.inputs:
            fields["input_columns"] = ",".join(item.inputs)
        started = time.perf_counter()
        try:
            response = client.post(
                f"{self.server.url}{URL}",
                headers={"Authorization": f"Bearer {self.key}"},
                files={"file": (item.filename, item.data)},
                data=fields,
                timeout=httpx.Timeout(DEADLINE_SECONDS, connect=10),
            )
        except httpx.TimeoutException:
            return None, "no answer within the deadline", time.perf_counter() - started
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started
        seconds = time.perf_counter() - started
        try:
            body: object = response.json()
        except ValueError:
            body = response.text[:200]
        return response.status_code, body, seconds


def judge(report: Report, item: Mutant, status: int | None, body: object, seconds: float) -> bool:
    """Record the outcome; False when the answer itself is a failure."""
    report.files += 1
    report.seconds.append(seconds)
    if status is None:
        report.outcomes["no answer"] += 1
        report.fail(item, str(body))
        return False
    report.outcomes[str(status)] += 1
    if status not in EXPECTED:
        report.fail(item, f"status {status}: {body}")
        return False
    if seconds > DEADLINE_SECONDS:
        report.fail(item, f"answered after {seconds:.1f} s")
        return False
    if status == 201:
        if not (isinstance(body, dict) and str(body.get("s3_uri", "")).startswith("datasets/")):
            report.fail(item, f"201 without the stored object: {body}")
            return False
        return True
    if not (isinstance(body, dict) and set(body) == {"detail"} and isinstance(body["detail"], str)):
        report.fail(item, f"{status} body is not {{'detail': text}}: {body}")
        return False
    if not body["detail"].strip():
        report.fail(item, f"{status} with an empty detail")
        return False
    if "Parquet reader stopped on it" in body["detail"]:
        report.reader_deaths += 1  # a native abort or crash, taken by a child
    return True


def one_after_another(target: Target, items: list[Mutant], report: Report) -> None:
    with httpx.Client() as client:
        for position, item in enumerate(items):
            if target.down:  # every file left is a failure, not a file fewer
                for left in items[position:]:
                    report.files += 1
                    report.outcomes["server down"] += 1
                    report.fail(left, "not sent: the server is down")
                return
            before = target.stored()
            status, body, seconds = target.send(client, item)
            judge(report, item, status, body, seconds)
            after = target.stored()
            if status != 201 and after != before:
                report.fail(item, f"stored after a refusal ({status}): {before} -> {after}")
            if status is None and not target.alive():
                report.fail(item, "the server is down")
                target.down = True


def at_once(target: Target, items: list[Mutant], report: Report, concurrency: int) -> None:
    if target.down:
        one_after_another(target, items, report)  # counts them as failures
        return
    before = target.stored()
    limits = httpx.Limits(max_connections=concurrency)
    with httpx.Client(limits=limits) as client, ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda item: target.send(client, item), items))
    accepted = 0
    for item, (status, body, seconds) in zip(items, answers, strict=True):
        judge(report, item, status, body, seconds)
        accepted += status == 201
    _, versions = target.stored()
    if versions - before[1] != accepted:
        report.failures.append(
            f"concurrent part: {accepted} accepted but {versions - before[1]} versions stored"
        )


def run(target: Target, files: int, seed: int, concurrency: int, baseline: bool) -> Report:
    """The whole check (see module): the baseline's report, then the fuzz's."""
    base = Report()
    if baseline:
        one_after_another(target, seed_files(), base)
    report = Report()
    corpus = mutants(files, seed, LIMIT_BYTES)
    sequential = corpus[: files - files // 5]
    one_after_another(target, sequential, report)
    at_once(target, corpus[len(sequential) :], report, concurrency)
    if not target.alive():
        report.failures.append("the server's process died or stopped answering")
    leftovers = list(target.tmp.iterdir()) if target.tmp.exists() else []
    if leftovers:
        report.failures.append(f"{len(leftovers)} upload temp folder(s) left behind")
    report.failures[:0] = [f"baseline {failure}" for failure in base.failures]
    report.baseline = base
    return report


def probe_cost(tmp: Path, rows: int = 1_000_000) -> tuple[float, float, float]:
    """(file MB, seconds of the child's read of a new Parquet file of the demo model's shape,
    seconds of the upload's own profile of it, the child's verdict remembered), in process."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.upload import _chunk
    from pipeline.intake.profiles import profile_parquet
    from pipeline.store.parquet_probe import check_parquet_file

    rng = np.random.default_rng(33)
    path = tmp / "probe.parquet"
    pq.write_table(pa.concat_tables(_chunk(rng, rows // 4) for _ in range(4)), path)
    check_parquet_file(seed_path())  # the probe server started, as in a running service
    started = time.perf_counter()
    check_parquet_file(path)
    probed = time.perf_counter()
    profile_parquet(path, None)
    return path.stat().st_size / 1e6, probed - started, time.perf_counter() - probed


def seed_path() -> Path:
    from bench._mutations import VENDOR

    return VENDOR / "data" / "alltypes_plain.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    started = time.perf_counter()
    with embedded_server(extra_env={"UPLOAD_MAX_BYTES": str(LIMIT_BYTES)}) as server:
        target = Target(server, create_key(server.url))
        report = run(target, args.files, args.seed, args.concurrency, baseline=True)
    for failure in report.failures:
        print(f"failure: {failure}")
    baseline = report.baseline or Report()
    print(f"seeds: {baseline.files}")
    for outcome, count in sorted(baseline.outcomes.items()):
        print(f"baseline_outcome_{outcome}: {count}")
    print(f"files: {report.files}")
    for outcome, count in sorted(report.outcomes.items()):
        print(f"outcome_{outcome.replace(' ', '_')}: {count}")
    print(f"native_reader_deaths_in_children: {report.reader_deaths + baseline.reader_deaths}")
    print(f"baseline_seconds_per_upload: {sum(baseline.seconds) / max(1, baseline.files):.3f}")
    print(f"fuzz_seconds_per_upload: {sum(report.seconds) / max(1, len(report.seconds)):.3f}")
    print(f"slowest_answer_seconds: {max(report.seconds, default=0):.2f}")
    print(f"run_seconds: {time.perf_counter() - started:.0f}")
    with tempfile.TemporaryDirectory(prefix="mk-bench-fuzz-") as tmp:
        size, probe, profile = probe_cost(Path(tmp))
    print(f"probe_file_mb: {size:.1f}")
    print(f"probe_seconds: {probe:.2f} (the child's read, before the upload reads it)")
    print(f"profile_seconds: {profile:.2f} (the upload's own read, PII scan off)")
    print(f"failures: {len(report.failures)}")
    files = report.files + baseline.files
    print(f"ratio: {len(report.failures) / max(1, files):.4f}")


if __name__ == "__main__":
    main()
