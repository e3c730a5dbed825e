"""The harness: the process inside the sandbox that runs the owner's `fit` and writes predictions.

Run as a script by the launcher (`python -I harness.py BOX`), never imported by the service.
It sees only its box folder: `model/` (the owner's folder), `train.parquet` (the training
frame, target included) and `features.parquet` (the benchmark's features, never its labels),
and `job.json` (entry point, target column, whether probabilities are wanted). It imports
`fit` from the owner's folder, fits, predicts and writes

- `predictions.npy` (plain numpy, no pickle: labels, values or a probability matrix) and,
  for probabilities, `classes.npy` (the model's `classes_`);
- `result.json`: ok with the CPU seconds used, or the error's type, errno and message (its
  traceback goes to stderr).

Everything it writes is checked outside (`pipeline.sandbox.predictions`): this file is a
convenience for honest trainers, not a safeguard. Under Dagster Pipes (DAGSTER_PIPES_CONTEXT
set) it also reports its progress as Pipes log messages.
"""

from __future__ import annotations

import importlib
import json
import os
import site
import sys
import time
import traceback
from typing import Any


def _write_result(box: str, result: dict[str, Any]) -> None:
    with open(os.path.join(box, "result.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)


def _plain(values: Any) -> Any:
    """An array numpy saves without pickle: object arrays of strings or numbers made typed.

    Anything else stays an object array, which numpy pickles and the service refuses to
    load ("predictions of the wrong type")."""
    import numpy as np

    array = np.asarray(values)
    if array.dtype == object:
        array = np.asarray(array.tolist())
    return array


def _cpu_seconds() -> float:
    """CPU time of this process and its children: inside a PID namespace it does not reach
    the launcher's accounting."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _pipes() -> Any:
    if "DAGSTER_PIPES_CONTEXT" not in os.environ:
        return None
    from dagster_pipes import open_dagster_pipes

    return open_dagster_pipes()


def _run(box: str, job: dict[str, Any], log: Any) -> None:
    import numpy as np
    import pandas as pd

    train = pd.read_parquet(os.path.join(box, "train.parquet"))
    features = pd.read_parquet(os.path.join(box, "features.parquet"))
    module_name, function_name = job["entry"].split(":")
    sys.path.insert(0, os.path.join(box, "model"))
    fit = getattr(importlib.import_module(module_name), function_name)
    log(f"fitting {job['entry']} on {len(train)} rows")
    started = time.monotonic()
    model = fit(train, job["target"])
    log(f"fitted in {time.monotonic() - started:.1f} s; predicting {len(features)} rows")
    if job["probabilities"]:
        np.save(os.path.join(box, "predictions.npy"), _plain(model.predict_proba(features)))
        np.save(os.path.join(box, "classes.npy"), _plain(model.classes_))
    else:
        np.save(os.path.join(box, "predictions.npy"), _plain(model.predict(features)))


def _limit_processes(count: int | None) -> None:
    """At most `count` processes and threads for this run, before any owner code: set here, in
    the sandbox's own user namespace, where the kernel counts only the run's tasks. Lowered
    for good: raising it back needs a capability the sandbox does not have."""
    if count is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (count, count))


def main(box: str, site_dirs: list[str]) -> int:
    with open(os.path.join(box, "job.json"), encoding="utf-8") as fh:
        job = json.load(fh)
    _limit_processes(job.get("max_processes"))
    for path in site_dirs:
        site.addsitedir(path)
    pipes = _pipes()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        if pipes is not None:
            pipes.log.info(message)

    try:
        _run(box, job, log)
    except BaseException as exc:  # the owner's code may raise anything, SystemExit included
        traceback.print_exc()
        _write_result(
            box,
            {
                "ok": False,
                "error": type(exc).__name__,
                "errno": getattr(exc, "errno", None),
                "message": str(exc)[:500],
            },
        )
        return 1
    finally:
        if pipes is not None:
            pipes.close()
    _write_result(box, {"ok": True, "cpu_seconds": _cpu_seconds()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
