"""Benchmark: valid rows POSTed in one request vs the physical limit of the same work.

    python bench/contributions.py                 # own server on a temp embedded store
    python bench/contributions.py --url URL --token TOKEN

The baseline, measured in this process in the same run, is what no server can avoid: orjson
parsing the same body and jsonschema-rs validating every row against the model's data-spec.
Prints `figure: value` lines: the end-to-end time for 1k, 10k and 100k rows (the cost must
grow linearly), the peak server memory for a body near the 50 MB limit (own server only) and,
last, `ratio: X` = end-to-end rows/s ÷ baseline rows/s for `--rows` rows, the median of pairs
measured one after the other (goal ≥ 0.5).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._server import JWT_SECRET, Server, embedded_server, peak_rss_mb
from pipeline.models.dataspec import compile_fast

CURVE = (1_000, 10_000, 100_000)
MEMORY_BODY_BYTES = 50_000_000  # just under the default 50 MiB contribution limit


def make_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    contracts = ["month-to-month", "one-year", "two-year"]
    methods = ["card", "bank-transfer", "electronic-check", "mailed-check"]
    return [
        {
            "tenure_months": rng.randint(0, 120),
            "monthly_charges": round(rng.uniform(10, 300), 2),
            "contract": rng.choice(contracts),
            "payment_method": rng.choice(methods),
            "support_calls": rng.randint(0, 20),
            "has_fiber": rng.random() < 0.5,
            "churned": rng.randint(0, 1),
        }
        for _ in range(n)
    ]


def make_body(model_id: int, n_rows: int) -> bytes:
    return orjson.dumps({"modelId": model_id, "benchmarkSpecId": None, "rows": make_rows(n_rows)})


def baseline_seconds(body: bytes, validator: Any) -> float:
    """orjson parse + jsonschema-rs validation of every row: the floor for any server."""
    start = time.perf_counter()
    rows = orjson.loads(body)["rows"]
    valid = all(map(validator.is_valid, rows))
    elapsed = time.perf_counter() - start
    assert valid
    return elapsed


def post_seconds(client: httpx.Client, model_id: int, token: str, body: bytes) -> float:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.perf_counter()
    response = client.post(f"/api/models/{model_id}/contributions", content=body, headers=headers)
    elapsed = time.perf_counter() - start
    if response.status_code != 202:
        raise SystemExit(f"POST failed: {response.status_code} {response.text[:500]}")
    return elapsed


def run(url: str, token: str, model_id: int, n_rows: int, repeats: int) -> None:
    with httpx.Client(base_url=url, timeout=300) as client:
        schema = client.get(f"/api/models/{model_id}/data-spec").json()
        validator = compile_fast(schema)
        post_seconds(client, model_id, token, make_body(model_id, 100))  # warm the server

        curve = {}
        for n in CURVE:
            if n == n_rows:
                continue  # measured below, paired with the baseline
            body = make_body(model_id, n)
            curve[n] = statistics.median(
                post_seconds(client, model_id, token, body) for _ in range(repeats)
            )
        # The POST and the baseline alternate, so both see the same load on a shared
        # machine; the ratio is the median of the pairs.
        body = make_body(model_id, n_rows)
        body_mb = len(body) / 1e6
        posts, bases = [], []
        for _ in range(repeats):
            posts.append(post_seconds(client, model_id, token, body))
            bases.append(baseline_seconds(body, validator))
        curve[n_rows] = statistics.median(posts)
        base = statistics.median(bases)
        ratio = statistics.median(b / p for b, p in zip(bases, posts, strict=True))

    e2e_rate = n_rows / curve[n_rows]
    base_rate = n_rows / base
    print(f"rows: {n_rows}")
    print(f"repeats: {repeats}")
    print(f"body_mb: {body_mb:.1f}")
    for n in CURVE:
        print(f"end_to_end_seconds_{n}_rows: {curve[n]:.4f}")
        print(f"end_to_end_microseconds_per_row_{n}_rows: {curve[n] / n * 1e6:.2f}")
    print(f"end_to_end_seconds_median: {curve[n_rows]:.4f}")
    print(f"end_to_end_rows_per_second: {e2e_rate:.0f}")
    print(f"baseline_orjson_jsonschema_rs_seconds_median: {base:.4f}")
    print(f"baseline_rows_per_second: {base_rate:.0f}")
    print(f"ratio: {ratio:.3f}")


def bench_token(server: Server) -> str:
    from pipeline.auth.sessions import issue_token
    from pipeline.core.config import Settings

    settings = Settings(marketplace_data_dir=server.data_dir, jwt_secret=JWT_SECRET)
    return issue_token(settings, "bench")


def measure_memory(model_id: int) -> None:
    """Peak RSS growth of a fresh server taking one body near the 50 MB limit."""
    per_row = len(make_body(model_id, 1000)) / 1000
    body = make_body(model_id, int(MEMORY_BODY_BYTES / per_row))
    with embedded_server() as server:
        assert server.pid is not None
        token = bench_token(server)
        with httpx.Client(base_url=server.url, timeout=300) as client:
            post_seconds(client, model_id, token, make_body(model_id, 1000))  # imports, caches
            # Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS (Linux).
            Path(f"/proc/{server.pid}/clear_refs").write_text("5")
            before = peak_rss_mb(server.pid) or 0.0
            seconds = post_seconds(client, model_id, token, body)
            peak = peak_rss_mb(server.pid) or 0.0
    body_mb = len(body) / 2**20
    print(f"memory_body_mib: {body_mb:.1f}")
    print(f"memory_body_seconds: {seconds:.3f}")
    print(f"memory_server_rss_before_mib: {before:.1f}")
    print(f"memory_server_peak_increase_mib: {peak - before:.1f}")
    print(f"memory_peak_increase_over_body: {(peak - before) / body_mb:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--token", help="session token for --url (marketplace token --user ID)")
    parser.add_argument("--model-id", type=int, default=1)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.url:
        if not args.token:
            parser.error("--url needs --token")
        run(args.url, args.token, args.model_id, args.rows, args.repeats)
        return
    measure_memory(args.model_id)
    with embedded_server() as server:
        run(server.url, bench_token(server), args.model_id, args.rows, args.repeats)


if __name__ == "__main__":
    main()
