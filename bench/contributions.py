"""Benchmark: 10,000 valid rows POSTed in one request vs validating them in-process.

    python bench/contributions.py                 # own server on a temp embedded store
    python bench/contributions.py --url URL --token TOKEN

Prints `figure: value` lines and, last, `ratio: X` = end-to-end rows/s ÷ in-process rows/s
with the same compiled validator (goal ≥ 0.5).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._server import JWT_SECRET, embedded_server
from pipeline.validation import RowValidator


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


def run(url: str, token: str, model_id: int, n_rows: int, repeats: int) -> None:
    rows = make_rows(n_rows)
    with httpx.Client(base_url=url, timeout=120) as client:
        schema = client.get(f"/api/models/{model_id}/data-spec").json()
        validator = RowValidator(schema)

        inproc = []
        for _ in range(repeats):
            start = time.perf_counter()
            errors = validator.errors_for(rows)
            inproc.append(time.perf_counter() - start)
            assert not errors, errors[:3]

        body = {"modelId": model_id, "benchmarkSpecId": None, "rows": rows}
        headers = {"Authorization": f"Bearer {token}"}
        e2e = []
        for _ in range(repeats):
            start = time.perf_counter()
            response = client.post(
                f"/api/models/{model_id}/contributions", json=body, headers=headers
            )
            e2e.append(time.perf_counter() - start)
            if response.status_code != 202:
                raise SystemExit(f"POST failed: {response.status_code} {response.text[:500]}")

    e2e_rate = n_rows / statistics.median(e2e)
    inproc_rate = n_rows / statistics.median(inproc)
    print(f"rows: {n_rows}")
    print(f"repeats: {repeats}")
    print(f"end_to_end_seconds_median: {statistics.median(e2e):.4f}")
    print(f"end_to_end_rows_per_second: {e2e_rate:.0f}")
    print(f"in_process_validation_seconds_median: {statistics.median(inproc):.4f}")
    print(f"in_process_rows_per_second: {inproc_rate:.0f}")
    print(f"ratio: {e2e_rate / inproc_rate:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server; default: start one")
    parser.add_argument("--token", help="session token for --url (marketplace token --user ID)")
    parser.add_argument("--model-id", type=int, default=1)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.url:
        if not args.token:
            parser.error("--url needs --token")
        run(args.url, args.token, args.model_id, args.rows, args.repeats)
        return
    with embedded_server() as server:
        from pipeline.config import Settings
        from pipeline.sessions import issue_token

        settings = Settings(marketplace_data_dir=server.data_dir, jwt_secret=JWT_SECRET)
        run(server.url, issue_token(settings, "bench"), args.model_id, args.rows, args.repeats)


if __name__ == "__main__":
    main()
