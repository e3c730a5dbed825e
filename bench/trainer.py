"""Benchmark: one evaluation with the owner's trainer in the sandbox, against the same estimator
in process.

    python bench/trainer.py
    python bench/trainer.py --rows 100000 --contribution-rows 1000 --bench-rows 5000

Values one 1,000-row contribution on top of 100,000 base rows against a 5,000-row benchmark
(demo churn data, accuracy, the default valuation settings): two models trained ("without"
and "with") and a bootstrap interval — one evaluation as the pipeline runs it
(`pipeline.rewards.valuation.value_batch`). In process, the model is the listed
`gradient_boosting_classifier` (`pipeline.models.estimators`); sandboxed, it is a train.py
that builds the same pipeline (same preprocessing, same estimator and seed), run in the
sandbox of `pipeline.sandbox` (launcher, bubblewrap, limits) by the plain subprocess runner,
the same launcher the Dagster Pipes runner starts. Both must reach the same scores; the
figures say so. Valuation needs no HTTP, so no server is started.

With its own environment (issue 37): the first registration of a folder whose
requirements.txt names one package with a wheel (`inflection`), installed with uv from the
package index into a fresh uv cache (the first install on a new host); a second registration
with the same requirements, which shares the environment (goal: under 1 s); and the sandboxed
evaluation again, its train.py run with an environment of its own whose requirements.txt pins
scikit-learn and what it needs at the service's versions (so the scores are the same), against
the same fit in process (`env_ratio`, goal ≤ 1.3 like `ratio`). Needs the package index.

Cost is CPU seconds of this process and of its children (the launcher, and the sandboxed
fits as the harness reports them: bubblewrap's PID namespace hides them from this process's
accounting), which other load on a shared machine disturbs far less than wall time; wall
seconds are printed beside it. Prints `figure: value` lines and, last, `ratio: X` =
sandboxed cost / in-process cost (goal ≤ 1.3: process start, data hand-over and result
read-back stay small next to the fit). The reference check every valuation by owner code adds
(docs/rewards.md §2c) is timed on the same valuation: `reference_check_*` lines, its share of
the sandboxed evaluation's CPU, and its cost for the contribution cut into a batch of 4.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import io
import json
import os
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, ClassVar, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd

from pipeline.core.config import load_settings
from pipeline.demo.churn_data import churn_rows
from pipeline.evaluation.fit_engine import FitEngine
from pipeline.evaluation.scorer import BenchmarkScorer
from pipeline.rewards.reference_check import ReferenceCheck, check_valuation
from pipeline.rewards.valuation import BatchValuation, Player, ValuationSettings, value_batch
from pipeline.sandbox.envs import interpreter
from pipeline.sandbox.outcome import TrainerOutput
from pipeline.sandbox.runner import OwnerTrainer, SubprocessRunner
from pipeline.sandbox.runs import SandboxLimits

ESTIMATOR = "gradient_boosting_classifier"
OPTIONS = {"task_type": "classification", "target_column": "churned", "metric_name": "accuracy"}

# The in-process pipeline of `pipeline.models.estimators` for ESTIMATOR, as an owner writes it.
TRAIN_PY = """
import math

import pandas as pd
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler


def _as_floats(frame):
    return pd.DataFrame(frame).apply(pd.to_numeric, errors="coerce").astype("float64")


def _as_text(frame):
    def text(value):
        if value is None or value is pd.NA or value is pd.NaT:
            return math.nan
        if isinstance(value, float) and math.isnan(value):
            return math.nan
        return str(value)

    return pd.DataFrame(frame).astype(object).map(text)


def fit(train, target):
    numeric = Pipeline([
        ("coerce", FunctionTransformer(_as_floats)),
        ("impute", SimpleImputer(strategy="median")),
        ("scale", StandardScaler()),
    ])
    categorical = Pipeline([
        ("coerce", FunctionTransformer(_as_text)),
        ("impute", SimpleImputer(strategy="most_frequent")),
        ("encode", OneHotEncoder(handle_unknown="ignore", max_categories=50)),
    ])
    features = ColumnTransformer([
        ("numeric", numeric, make_column_selector(dtype_include="number")),
        ("categorical", categorical, make_column_selector(dtype_exclude="number")),
    ])
    estimator = GradientBoostingClassifier(random_state=0)
    model = Pipeline([("features", features), ("model", estimator)])
    return model.fit(train.drop(columns=[target]), train[target].to_numpy())
"""

T = TypeVar("T")


class CountedTrainer(OwnerTrainer):
    """The trainer, adding up the CPU seconds its sandboxed runs report: a process in bwrap's
    PID namespace is not counted in this process's children."""

    reported: ClassVar[list[float]] = []

    def predict(self, *args: Any, **kwargs: Any) -> TrainerOutput:
        output = super().predict(*args, **kwargs)
        self.reported.append(output.cpu_seconds or 0.0)
        return output


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(action: Callable[[], T]) -> tuple[float, float, T]:
    """(CPU seconds of this process and its children; wall seconds; result)."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    result = action()
    return cpu_seconds() - cpu, time.perf_counter() - wall, result


def evaluate(
    scorer: BenchmarkScorer, base: pd.DataFrame, contribution: pd.DataFrame
) -> BatchValuation:
    settings = ValuationSettings.from_settings(load_settings())
    one_worker = dataclasses.replace(settings, engine=FitEngine(workers=1))
    return value_batch(
        scorer, base, [Player("c", contribution)], higher_is_better=True, settings=one_worker
    )


def reference(
    scorer: BenchmarkScorer,
    base: pd.DataFrame,
    contribution: pd.DataFrame,
    valuation: BatchValuation,
    pieces: int = 1,
) -> ReferenceCheck:
    """The reference check of `valuation`; with `pieces`, of the contribution cut into that many
    players sharing the pool equally (what the check costs does not depend on the shares)."""
    settings = dataclasses.replace(
        ValuationSettings.from_settings(load_settings()), engine=FitEngine(workers=1)
    )
    players = [Player(f"c{i}", part) for i, part in enumerate(_pieces(contribution, pieces))]
    if pieces > 1:
        shares = {p.key: valuation.pool_pct / pieces for p in players}
        valuation = dataclasses.replace(valuation, shares=shares, rejected={})
    else:
        players = [Player("c", contribution)]
    return check_valuation(scorer, base, players, valuation, settings=settings)


def _pieces(frame: pd.DataFrame, count: int) -> list[pd.DataFrame]:
    size = -(-len(frame) // count)
    return [frame.iloc[i : i + size].reset_index(drop=True) for i in range(0, len(frame), size)]


def _register(folder: Path) -> tuple[float, dict[str, Any]]:
    """`marketplace models add FOLDER` in process on the temporary store: wall seconds, and the
    model's view (`GET /api/models`'s entry)."""
    from cli.main import main as cli_main
    from pipeline.core.config import get_settings
    from pipeline.models.registry import find_model
    from pipeline.services import Services

    started = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        status = cli_main(["models", "add", str(folder)])
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"registering {folder} failed")
    with Services(get_settings()) as services, services.db.session() as session:
        model = find_model(session, json.loads((folder / "model.json").read_text())["name"])
        return seconds, {"env": model.trainer_env, "bytes": model.trainer_env_bytes}


def _env_folder(root: Path, name: str, requirements: str, train_py: str = TRAIN_PY) -> Path:
    from pipeline.models.definitions import demo_definition

    definition = demo_definition().model_dump()
    definition.update(name=name, estimator=None, trainer="train:fit")
    root.mkdir(parents=True)
    (root / "model.json").write_text(json.dumps(definition))
    (root / "train.py").write_text(textwrap.dedent(train_py))
    (root / "requirements.txt").write_text(requirements)
    return root


def _service_pins(*names: str) -> str:
    """requirements.txt lines pinning packages (and what they need) at the service's versions."""
    from packaging.requirements import Requirement

    pins: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in pins:
            continue
        pins[name] = importlib.metadata.version(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def environments(tmp: Path) -> Path:
    """Registrations with requirements on a temporary store; the sklearn environment's path."""
    from pipeline.bootstrap import prepare_store
    from pipeline.core.config import get_settings

    os.environ["MARKETPLACE_DATA_DIR"] = str(tmp / "data")
    os.environ.pop("DATABASE_URL", None)
    os.environ["UV_CACHE_DIR"] = str(tmp / "uv-cache")  # a new host's first install
    get_settings.cache_clear()
    prepare_store(get_settings())
    one = "inflection==0.5.1\n"
    first, view = _register(_env_folder(tmp / "a", "env-first", one))
    second, again = _register(_env_folder(tmp / "b", "env-second", one))
    print(f"env_first_registration_seconds: {first:.3f}")
    print(f"env_size_mb: {view['bytes'] / 1024 / 1024:.1f}")
    print(f"env_second_registration_seconds: {second:.3f}")
    print(f"env_shared: {view['env'] == again['env']}")
    pins = _service_pins("scikit-learn")
    _, fitted = _register(_env_folder(tmp / "c", "env-sklearn", pins))
    return get_settings().envs_dir / str(fitted["env"])


def run(rows: int, contribution_rows: int, bench_rows: int) -> None:
    bench = pd.DataFrame(churn_rows(bench_rows, seed=1))
    base = pd.DataFrame(churn_rows(rows, seed=2))
    contribution = pd.DataFrame(churn_rows(contribution_rows, seed=100))
    print(f"base_rows: {rows}")
    print(f"contribution_rows: {contribution_rows}")
    print(f"benchmark_rows: {bench_rows}")
    print(f"estimator: {ESTIMATOR}")

    in_process = BenchmarkScorer(bench, estimator=ESTIMATOR, **OPTIONS)  # type: ignore[arg-type]
    inside_cpu, inside_wall, inside = timed(lambda: evaluate(in_process, base, contribution))

    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(textwrap.dedent(TRAIN_PY))
        trainer = CountedTrainer(
            folder,
            "train:fit",
            SubprocessRunner(),
            SandboxLimits.from_settings(settings),
            settings.trainer_isolation,
        )
        sandboxed = BenchmarkScorer(bench, estimator=None, trainer=trainer, **OPTIONS)  # type: ignore[arg-type]
        boxed_cpu, boxed_wall, boxed = timed(lambda: evaluate(sandboxed, base, contribution))
        boxed_cpu += sum(CountedTrainer.reported)
        check_cpu, check_wall, check = timed(
            lambda: reference(sandboxed, base, contribution, boxed)
        )
        batch_cpu, _, _ = timed(lambda: reference(sandboxed, base, contribution, boxed, pieces=4))

        # Apart from the model folder, which each run copies into its box.
        env_tmp = Path(tempfile.mkdtemp(prefix="bench-envs-"))
        env = environments(env_tmp)
        assert interpreter(env).exists()
        CountedTrainer.reported.clear()
        own = CountedTrainer(
            folder,
            "train:fit",
            SubprocessRunner(),
            SandboxLimits.from_settings(settings),
            settings.trainer_isolation,
            env=env,
        )
        with_env = BenchmarkScorer(bench, estimator=None, trainer=own, **OPTIONS)  # type: ignore[arg-type]
        env_cpu, env_wall, env_run = timed(lambda: evaluate(with_env, base, contribution))
        env_cpu += sum(CountedTrainer.reported)
        shutil.rmtree(env_tmp, ignore_errors=True)

    print(f"in_process_cpu_seconds: {inside_cpu:.3f}")
    print(f"in_process_wall_seconds: {inside_wall:.3f}")
    print(f"sandboxed_cpu_seconds: {boxed_cpu:.3f}")
    print(f"sandboxed_runs: {len(CountedTrainer.reported)}")
    print(f"sandboxed_wall_seconds: {boxed_wall:.3f}")
    print(f"in_process_scores: {inside.score_without:.6f} -> {inside.score_with:.6f}")
    print(f"sandboxed_scores: {boxed.score_without:.6f} -> {boxed.score_with:.6f}")
    same = (inside.score_without, inside.score_with) == (boxed.score_without, boxed.score_with)
    print(f"same_scores: {same}")
    # The reference check of docs/rewards.md §2c, added to every valuation by owner code: two
    # fits of the reference estimator (a batch of one); a batch of 4 adds the surrogate's split.
    print(f"reference_check_holds: {check.holds} ({check.describe()})")
    print(f"reference_check_cpu_seconds: {check_cpu:.3f}")
    print(f"reference_check_wall_seconds: {check_wall:.3f}")
    print(f"reference_check_batch_4_cpu_seconds: {batch_cpu:.3f}")
    print(f"reference_check_share: {check_cpu / boxed_cpu:.3f}")

    print(f"env_sandboxed_cpu_seconds: {env_cpu:.3f}")
    print(f"env_sandboxed_wall_seconds: {env_wall:.3f}")
    print(f"env_scores: {env_run.score_without:.6f} -> {env_run.score_with:.6f}")
    env_same = (env_run.score_without, env_run.score_with) == (
        boxed.score_without,
        boxed.score_with,
    )
    print(f"env_same_scores: {env_same}")
    print(f"env_ratio: {env_cpu / inside_cpu:.3f}")
    print(f"wall_ratio: {boxed_wall / inside_wall:.3f}")
    print(f"ratio: {boxed_cpu / inside_cpu:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000, help="base training rows")
    parser.add_argument("--contribution-rows", type=int, default=1000)
    parser.add_argument("--bench-rows", type=int, default=5000, help="benchmark rows")
    args = parser.parse_args()
    run(args.rows, args.contribution_rows, args.bench_rows)


if __name__ == "__main__":
    main()
