"""`marketplace demo-data`: files to try the marketplace with, made for a model of the server."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cli.client import ClientError
from cli.connection import connection_options, handles_errors, make_client, parse_model_id
from cli.terminal import note
from pipeline.core.csv_cells import write_csv
from pipeline.core.errors import InvalidInput
from pipeline.demo.demo_data import (
    BENCHMARK_ROWS,
    CONTRIBUTION_ROWS,
    DEFAULT_SEED,
    DemoModel,
    demo_wallet_key,
    make_demo_data,
)
from pipeline.demo.loan_data import EVAL_SPLIT
from pipeline.rewards.manifests import MANIFEST_FILENAME as MANIFEST_FILE

BENCHMARK_FILE = "benchmark.csv"
CONTRIBUTION_FILE = "contribution.csv"
DEMO_MODEL_ID = 1

# The demo wallet's private key (fixed and public), for `marketplace claim --key-file`.
WALLET_KEY_FILE = "wallet.key"


def write_demo_file(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        # Booleans as true/false, as the CLI's reader and the benchmark reader parse them back.
        write_csv(handle, columns, rows)


@handles_errors
def cmd_demo_data(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        models = {model["id"]: model for model in client.list_models()}
        info = models.get(args.model)
        if info is None:
            known = ", ".join(f"{i} ({m['name']})" for i, m in sorted(models.items())) or "none"
            raise ClientError(f"no model {args.model} on the server (models: {known})")
        model = DemoModel(
            name=info["name"],
            task_type=info["task_type"],
            target_column=info["target_column"],
            data_spec=client.data_spec(args.model),
        )
    try:
        data = make_demo_data(
            model,
            seed=args.seed,
            benchmark_rows=args.benchmark_rows,
            contribution_rows=args.contribution_rows,
        )
    except InvalidInput as exc:
        raise ClientError(f"model {args.model} ({model.name}): {exc.detail}") from None
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    benchmark, contribution, manifest = (
        folder / BENCHMARK_FILE,
        folder / CONTRIBUTION_FILE,
        folder / MANIFEST_FILE,
    )
    write_demo_file(benchmark, data.benchmark, data.columns)
    write_demo_file(contribution, data.contribution, data.columns)
    manifest.write_text(json.dumps(data.manifest, indent=2) + "\n", encoding="utf-8")
    print(f"model {args.model} ({model.name}), target column {model.target_column}:")
    base = sum(1 for row in data.benchmark if row.get("split", EVAL_SPLIT) != EVAL_SPLIT)
    detail = (
        f"{len(data.benchmark) - base} benchmark rows (split {EVAL_SPLIT}) and {base} rows of "
        "the owner's base training data"
        if base
        else f"{len(data.benchmark)} rows"
    )
    print(f"wrote {benchmark} ({detail})")
    print(f"wrote {contribution} ({len(data.contribution)} rows)")
    print(f"wrote {manifest} (wallet {data.manifest['wallet_address']})")
    key = folder / WALLET_KEY_FILE
    key.touch(mode=0o600)
    key.write_text(demo_wallet_key() + "\n", encoding="utf-8")
    print(f"wrote {key} (the demo wallet's key, public: a local chain's only)")
    note(
        f"next: marketplace upload {args.model} {benchmark}\n"
        f"      marketplace contribute {args.model} {contribution} --manifest {manifest} --wait"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser(
        "demo-data",
        parents=[connection_options()],
        help="write a benchmark, a contribution that improves the model, and a manifest",
        description="Write DIR/benchmark.csv, DIR/contribution.csv (rows that pass every check "
        "and improve the model over a fresh one) and DIR/manifest.json (a valid contributor "
        "manifest) for a model of the server. The same model and seed give the same files.",
    )
    demo.add_argument("dir", metavar="DIR", help="folder to write the files into")
    demo.add_argument(
        "--model",
        type=parse_model_id,
        default=DEMO_MODEL_ID,
        metavar="ID",
        help="model id (default %(default)s, the demo model)",
    )
    demo.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="other rows (default %(default)s)"
    )
    demo.add_argument("--benchmark-rows", type=int, default=BENCHMARK_ROWS, metavar="N")
    demo.add_argument(
        "--contribution-rows",
        type=int,
        default=CONTRIBUTION_ROWS,
        metavar="N",
        help="default %(default)s: one request of `marketplace contribute`",
    )
    demo.set_defaults(handler=cmd_demo_data)
