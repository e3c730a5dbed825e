"""`marketplace upload`: a benchmark dataset sent with a platform API key, with model defaults.

Fields the user leaves out default to what fits the model (its target column, its task type's
usual metric and that metric's direction) rather than the spec's HTTP defaults.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.progress import DownloadColumn, TransferSpeedColumn

from cli.client import CREDENTIAL_HINTS, MissingCredential
from cli.connection import handles_errors, make_client
from cli.datafiles import RowFileError, file_sha256
from cli.terminal import note, progress_bar, stderr_console

# The metric a benchmark tracks when none is given, per task type; classification is the
# spec's HTTP default, which a regression model cannot use.
DEFAULT_METRIC = {"classification": "accuracy", "regression": "rmse"}


def model_upload_fields(fields: dict[str, str], model: dict[str, Any] | None) -> dict[str, str]:
    """The upload's form fields with the model's own defaults where the user gave none.

    `target_column` defaults to the model's target column (the spec's HTTP default, `target`,
    rarely is), `metric_name` to the task type's usual metric and `metric_direction` to the
    metric's natural direction. Without the model (unknown id) the fields go as given and the
    server answers.
    """
    # The metric table's module loads pandas and numpy (~0.3 s): only `upload` needs it, not
    # every `marketplace` start.
    from pipeline.evaluation.metrics import METRICS

    chosen = dict(fields)
    if model is not None:
        chosen.setdefault("target_column", str(model["target_column"]))
        metric = DEFAULT_METRIC.get(str(model.get("task_type")))
        if metric is not None:
            chosen.setdefault("metric_name", metric)
    known = METRICS.get(chosen.get("metric_name", ""))
    if known is not None:
        chosen.setdefault("metric_direction", known.direction)
    return chosen


@handles_errors
def cmd_upload(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise RowFileError(f"{path}: no such file")
    fields = {
        name: value
        for name, value in {
            "eval_split": args.eval_split,
            "metric_name": args.metric_name,
            "metric_direction": args.metric_direction,
            "target_column": args.target_column,
            "input_columns": args.input_columns,
        }.items()
        if value is not None
    }
    if args.allow_pii:
        fields["allow_pii"] = "true"
    size = path.stat().st_size
    with make_client(args) as client:
        if not client.credentials.api_key:
            raise MissingCredential(CREDENTIAL_HINTS["api_key"])
        if not {"target_column", "metric_name", "metric_direction"} <= set(fields):
            model = next((m for m in client.list_models() if m["id"] == args.model_id), None)
            fields = model_upload_fields(fields, model)
            note(
                f"target column {fields.get('target_column', 'target')}, metric "
                f"{fields.get('metric_name', 'accuracy')} "
                f"({fields.get('metric_direction', 'higher_is_better')})"
            )
        console = stderr_console()
        with progress_bar(console, DownloadColumn(), TransferSpeedColumn()) as progress:
            task = progress.add_task(f"uploading {path.name}", total=size)
            result = client.upload_benchmark(
                args.model_id,
                path,
                fields,
                on_progress=lambda done: progress.update(task, completed=done),
            )
            progress.update(task, completed=size)
    print(json.dumps(result, indent=2))
    if result.get("sha256_hash") and result["sha256_hash"] != file_sha256(path):
        note("warning: the server's sha256_hash differs from this file's digest")
        return 1
    return 0
