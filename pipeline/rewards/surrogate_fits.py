"""The surrogate game's coalition fits: the objective of the model's own linear estimator,
solved for every coalition from statistics of its parts (`pipeline.rewards.surrogate`).

Features are one transform of all the rows (the model's preprocessing fitted once) with an
intercept column last. The model's estimator scales its numeric columns on the rows it is
trained on, so a coalition's fit differs from a fit on that shared transform in the penalty
only: a coefficient w on a column standardised over the coalition is w / s on the shared
column (s: that column's standard deviation over the coalition, from each part's weighted sums),
so the penalty λ w² becomes λ s² v² (`coalition_penalty`). The intercept is never penalised.

- Least squares (linear regression λ = 0, ridge λ = alpha): centred normal equations, exact.
  With λ = 0 the minimum-norm solution, as scikit-learn's `lstsq` on centred data.
- Logistic regression (λ = 1/C): binomial with two classes, multinomial (softmax) with more, as
  scikit-learn's lbfgs. The fit on every part is found by damped Newton; each coalition's fit
  starts there and iterates with the coalition's Hessian at that fit (the sum of its parts',
  factored once) and the coalition's exact gradient, vectorised over coalitions, until it
  converges: the chord method, linear convergence at a cost of two matrix products per step.
  Binomial passes run in float32 around the full fit, as precise as float64's
  (`pipeline.rewards.anchored_passes`); multinomial ones in float32 while steps are large
  (`COARSE_STEP`), the last ones in float64.
  A coalition stops when its step, or its estimated remaining error, is below `TOLERANCE`.
  A coalition that does not converge so is finished by full Newton steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.rewards.anchored_passes import CHUNK_CELLS, Anchored
from pipeline.rewards.logistic_parts import LogisticPart

# Softmax intercepts are determined only up to a common shift: a vanishing penalty fixes it.
INTERCEPT_PENALTY = 1e-6
NEWTON_STEPS = 50
# Beyond this many chord passes a coalition is far from the full fit: full Newton is faster.
CHORD_STEPS = 20
# Coefficient steps below this end the iterations (scikit-learn's lbfgs stops at a gradient
# tolerance of 1e-4; 1e-6 gave the same shares on the bench's batches, with a third more passes).
TOLERANCE = 1e-5
# The fit on every part is only where the coalitions' chord passes start from (their gradients
# there are exact wherever it is): this close to the optimum it is as good a start, one Newton
# step sooner.
ANCHOR_TOLERANCE = 1e-3
# The anchor's first Newton steps run on every stride-th row, the stride leaving about this
# many rows (`anchor_fit`): they only bring it near the fit, and cost a tenth as much there.
ANCHOR_SAMPLE_ROWS = 2048
# ... unless the sample holds fewer rows than this of some class (or of its absence): a rare
# class the stride misses drives the sample's unpenalised intercept towards -inf, a start from
# which Newton's steps on every row run away (churn rows with 3 positives in 11,000 did).
ANCHOR_SAMPLE_CLASS_ROWS = 10
# A coalition's chord pass runs in float32 while its last step was at least this large: such a
# pass costs about a third of a float64 one, and its rounding (a few 1e-7 on a coefficient)
# is far below the step. The passes that end the iterations, and so set the fit, are float64.
COARSE_STEP = 1e-2
# Linear convergence at a rate below this lets a coalition stop once its estimated remaining
# error (step * rate / (1 - rate)) is below TOLERANCE, one pass before its step is.
STOP_RATE = 0.5


@dataclass(frozen=True)
class Moments:
    """A part's weighted row count and per-column sums and sums of squares."""

    count: float
    sums: np.ndarray
    squares: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, weight: np.ndarray) -> Moments:
        return cls(float(weight.sum()), weight @ x, weight @ (x * x))


def coalition_penalty(moments: Sequence[Moments], scaled: np.ndarray, penalty: float) -> np.ndarray:
    """The penalty per column (intercept last, 0) for a coalition of parts (module docstring).

    `scaled` marks the columns the model standardises; a column constant over the coalition
    gets the plain penalty (its standardised coefficient has no data and is 0)."""
    return np.asarray(coalition_penalties(moments, np.ones((1, len(moments))), scaled, penalty)[0])


def coalition_penalties(
    moments: Sequence[Moments], membership: np.ndarray, scaled: np.ndarray, penalty: float
) -> np.ndarray:
    """`coalition_penalty` of many coalitions at once (`membership`: coalitions x parts, 1 for
    a member), coalitions x columns."""
    count = membership @ np.asarray([m.count for m in moments])
    mean = (membership @ np.stack([m.sums for m in moments])) / count[:, None]
    squares = (membership @ np.stack([m.squares for m in moments])) / count[:, None]
    variance = np.maximum(squares - mean * mean, 0.0)
    constant = variance <= 1e-12 * (1.0 + mean * mean)
    result = penalty * np.where(scaled & ~constant, variance, 1.0)
    result[:, -1] = 0.0
    return np.asarray(result)


def least_squares(gram: np.ndarray, moment: np.ndarray, pen: np.ndarray) -> np.ndarray:
    """Coefficients (intercept last) from a coalition's XᵀWX and XᵀWy over [X, 1]."""
    count = gram[-1, -1]
    mean, target_mean = gram[-1, :-1] / count, moment[-1] / count
    centred = gram[:-1, :-1] - count * np.outer(mean, mean)
    right = moment[:-1] - count * mean * target_mean
    if np.any(pen[:-1] > 0):
        w = np.linalg.solve(centred + np.diag(pen[:-1]), right)
    else:
        w = np.linalg.lstsq(centred, right, rcond=1e-10)[0]
    return np.append(w, target_mean - mean @ w)


def probabilities(eta: np.ndarray) -> np.ndarray:
    """Class probabilities from linear predictors (last axis: one column binomial, else K)."""
    return probabilities_in_place(np.array(eta, dtype="float64"))


def probabilities_in_place(eta: np.ndarray) -> np.ndarray:
    """`probabilities`, overwriting `eta` (a float array): the coalitions' passes hold
    millions of cells, and each temporary costs as much as the arithmetic."""
    if eta.shape[-1] == 1:
        eta *= 0.5
        np.tanh(eta, out=eta)
        eta += 1.0
        eta *= 0.5
        return eta
    eta -= eta.max(axis=-1, keepdims=True)
    np.exp(eta, out=eta)
    eta /= eta.sum(axis=-1, keepdims=True)
    return eta


def part_hessians(parts: Sequence[LogisticPart], etas: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each part's Hessian of the loss (outputs x features, class-major) where its linear
    predictors are `etas` (rows x outputs)."""
    return [_hessian(part, probabilities(eta)) for part, eta in zip(parts, etas, strict=True)]


def _hessian(part: LogisticPart, p: np.ndarray) -> np.ndarray:
    """The part's Hessian where its rows' class probabilities are `p`."""
    outputs = p.shape[1]
    if outputs == 1:
        return np.asarray((part.x * (part.weight * p[:, 0] * (1 - p[:, 0]))[:, None]).T @ part.x)
    dims = part.x.shape[1]
    blocks = np.empty((outputs, dims, outputs, dims))
    for k in range(outputs):
        for j in range(k, outputs):
            curvature = part.weight * p[:, k] * ((k == j) - p[:, j])
            blocks[k, :, j, :] = (part.x * curvature[:, None]).T @ part.x
            blocks[j, :, k, :] = blocks[k, :, j, :].T
    return blocks.reshape(outputs * dims, outputs * dims)


def _gradient_at(part: LogisticPart, p: np.ndarray) -> np.ndarray:
    """The part's gradient where its rows' class probabilities are `p`."""
    return np.asarray((part.x.T @ ((part.y - p) * part.weight[:, None])).T)


def _loss(
    parts: Sequence[LogisticPart], etas: Sequence[np.ndarray], beta: np.ndarray, pen: np.ndarray
) -> float:
    """The penalised loss at `beta`, whose linear predictors on each part are `etas`."""
    total = 0.5 * float(np.sum(pen * beta * beta))
    for part, eta in zip(parts, etas, strict=True):
        if beta.shape[0] == 1:
            nll = _softplus(eta[:, 0]) - part.y[:, 0] * eta[:, 0]
        else:
            top = eta.max(axis=1)
            logsum = top + np.log(np.exp(eta - top[:, None]).sum(axis=1))
            nll = logsum - (part.y * eta).sum(axis=1)
        total += float(part.weight @ nll)
    return total


def _softplus(eta: np.ndarray) -> np.ndarray:
    """log(1 + e^η) as max(η, 0) + log(1 + e^−|η|): NumPy's vectorised exp and log, at a third
    of `np.logaddexp`'s time here (its loop is scalar); 1 + e^−|η| rounds away at most the
    last bits of a term below 1e-16, far within the line search's 1e-12 of the loss."""
    result = np.abs(eta)
    np.negative(result, out=result)
    np.exp(result, out=result)
    result += 1.0
    np.log(result, out=result)
    result += np.maximum(eta, 0.0)
    return np.asarray(result)


def _full_penalty(pen: np.ndarray, outputs: int) -> np.ndarray:
    rows = np.tile(pen, (outputs, 1))
    if outputs > 1:
        rows[:, -1] = INTERCEPT_PENALTY
    return rows


def logistic_fit(
    parts: Sequence[LogisticPart],
    pen: np.ndarray,
    start: np.ndarray | None = None,
    tolerance: float = TOLERANCE,
) -> np.ndarray:
    """The penalised logistic fit on `parts` (outputs x features), by damped Newton, to
    `tolerance` (`ANCHOR_TOLERANCE` for the coalitions' anchor)."""
    outputs, dims = parts[0].y.shape[1], parts[0].x.shape[1]
    pen_rows = _full_penalty(pen, outputs)
    beta = np.zeros((outputs, dims))
    # Each part's linear predictors at `beta`, from the loss's evaluation: the gradient and
    # Hessian there take them, and the probabilities once, instead of a product each.
    etas = [np.zeros((len(p.x), outputs)) for p in parts]
    loss = _loss(parts, etas, beta, pen_rows)
    if start is not None:
        # A start no better than zero is not used: Newton's steps from it can run away.
        start_etas = [p.x @ start.T for p in parts]
        start_loss = _loss(parts, start_etas, start, pen_rows)
        if start_loss < loss:
            beta, etas, loss = start.copy(), start_etas, start_loss
    last = math.inf  # the last full step's size
    for _ in range(NEWTON_STEPS):
        proba = [probabilities(eta) for eta in etas]
        gradient = sum(_gradient_at(*pair) for pair in zip(parts, proba, strict=True))
        gradient = gradient - pen_rows * beta
        hessian = sum(_hessian(*pair) for pair in zip(parts, proba, strict=True))
        hessian = hessian + np.diag(pen_rows.ravel())
        step = _solve(hessian, gradient.ravel()).reshape(beta.shape)
        scale = 1.0
        while scale > 1e-4:
            trial = beta + scale * step
            trial_etas = [p.x @ trial.T for p in parts]
            trial_loss = _loss(parts, trial_etas, trial, pen_rows)
            if trial_loss <= loss + 1e-12 * abs(loss):
                break
            scale /= 2
        else:
            break  # no step lowers the loss: `beta` is as far as Newton gets (a step up diverges)
        beta, loss, etas = trial, trial_loss, trial_etas
        size = float(np.max(np.abs(scale * step)))
        # Full Newton steps near the fit converge quadratically (a step a tenth of the last
        # or less): the next is about size³ / last², and below TOLERANCE it need not be taken
        # (one step of the usual seven from zero).
        quadratic = scale == 1.0 and size < 0.1 * last < math.inf
        if size < tolerance or (quadratic and size**3 < tolerance * last**2):
            break
        last = size if scale == 1.0 else math.inf
    return beta


def anchor_fit(parts: Sequence[LogisticPart], pen: np.ndarray) -> np.ndarray:
    """The fit on every part, to `ANCHOR_TOLERANCE`: the coalitions' starting point. Its
    Newton steps from zero (about six) are taken on every `stride`-th row of the parts, in
    one part (a few thousand rows), and only the last one or two on every row of each part."""
    stride = sum(len(part.x) for part in parts) // ANCHOR_SAMPLE_ROWS
    start = None
    if stride >= 4:
        thin = LogisticPart(
            np.concatenate([part.x[::stride] for part in parts]),
            np.concatenate([part.y[::stride] for part in parts]),
            np.concatenate([part.weight[::stride] for part in parts]) * stride,
        )
        counts = thin.y.sum(axis=0)
        if counts.min() >= ANCHOR_SAMPLE_CLASS_ROWS and (
            thin.y.shape[1] > 1 or len(thin.y) - counts[0] >= ANCHOR_SAMPLE_CLASS_ROWS
        ):
            start = logistic_fit([thin], pen, tolerance=ANCHOR_TOLERANCE)
    return logistic_fit(parts, pen, start=start, tolerance=ANCHOR_TOLERANCE)


@dataclass(frozen=True)
class AtFullFit:
    """What every round's coalition fits start from, the same in each: the parts' gradients at
    the fit on every part, and the binomial parts seen from it (`Anchored`; None: multinomial,
    or a row beyond `anchored_passes.ANCHOR_LIMIT`)."""

    gradients: np.ndarray  # parts x outputs x features
    anchored: Anchored | None

    @classmethod
    def of(
        cls,
        parts: Sequence[LogisticPart],
        full: np.ndarray,
        hessians: Sequence[np.ndarray],
        etas: Sequence[np.ndarray] | None = None,
    ) -> AtFullFit:
        """`etas`: each part's linear predictors at `full` (rows x outputs), when known."""
        etas = [part.x @ full.T for part in parts] if etas is None else etas
        gradients = np.stack(
            [_gradient_at(part, probabilities(eta)) for part, eta in zip(parts, etas, strict=True)]
        )
        return cls(gradients, Anchored.of(parts, full, hessians, etas))


def coalition_fits(
    parts: Sequence[LogisticPart],
    full: np.ndarray,
    hessians: Sequence[np.ndarray],
    coalitions: Sequence[Sequence[int]],
    pens: np.ndarray,
    at_full: AtFullFit | None = None,
) -> list[np.ndarray]:
    """Each coalition's logistic fit (coalitions: lists of part indices), from the fit on
    every part `full` and the parts' Hessians there (module docstring); `pens`: each
    coalition's penalty per column (`coalition_penalties`); `at_full`: `AtFullFit.of` these
    parts, when a game's rounds share it."""
    outputs = full.shape[0]
    pen_rows = np.repeat(np.asarray(pens)[:, None, :], outputs, axis=1)
    if outputs > 1:
        pen_rows[:, :, -1] = INTERCEPT_PENALTY  # as `_full_penalty`
    membership = np.zeros((len(coalitions), len(parts)))
    for row, members in enumerate(coalitions):
        membership[row, list(members)] = 1.0
    inverses, slow = _chord_inverses(hessians, membership, pen_rows)
    betas = np.repeat(full[None], len(coalitions), axis=0)
    active = np.setdiff1d(np.arange(len(coalitions)), slow)
    # The active coalitions' inverses, cut only when some converge: indexing the (coalitions,
    # n, n) stack on every pass copied all of it (n in the thousands with one-hot columns).
    inv = np.delete(inverses, slow, axis=0) if slow else inverses
    # Every coalition's first pass is at `full`: its gradient is a sum of the parts' there,
    # each computed once (and that pass is a Newton step, the chord matrix being exact there).
    start = at_full or AtFullFit.of(parts, full, hessians)
    from_full = (membership @ start.gradients.reshape(len(parts), -1)).reshape(betas.shape)
    anchored = start.anchored
    last = np.full(len(coalitions), np.inf)  # each coalition's last step (largest change)
    for step in range(CHORD_STEPS):
        if not len(active):
            break  # every coalition's chord matrix singular: each takes Newton's steps below
        coarse = last[active] >= COARSE_STEP
        gradients = from_full[active]
        if step and anchored is not None:
            gradients -= anchored.shifts(betas[active] - full, membership[active])
        for rows, single in ((coarse, True), (~coarse, False)) if step and anchored is None else ():
            if rows.any():
                ids = active[rows]
                chosen = [coalitions[i] for i in ids]
                gradients[rows] = _gradients(parts, betas[ids], chosen, single=single)
        rhs = (gradients - pen_rows[active] * betas[active]).reshape(len(active), -1, 1)
        steps = (inv @ rhs).reshape(len(active), *full.shape)
        betas[active] += steps
        size = np.max(np.abs(steps), axis=(1, 2))
        with np.errstate(divide="ignore", invalid="ignore"):  # a last step of 0: no rate
            rate = size / last[active]  # none after the first step (its last is infinite)
            sure = (rate < STOP_RATE) & np.isfinite(last[active])
            left = np.where(sure, size * rate / (1.0 - rate), np.inf)
        moved = (coarse & (anchored is None)) | ((size >= TOLERANCE) & (left >= TOLERANCE))
        last[active] = size
        if not moved.all():
            active, inv = active[moved], inv[moved]
        if not len(active):
            break
    for i in [*slow, *active.tolist()]:  # no factor, or slow by chords: full Newton from there
        betas[i] = logistic_fit([parts[j] for j in coalitions[i]], pens[i], betas[i])
    return list(betas)


def _chord_inverses(
    hessians: Sequence[np.ndarray], membership: np.ndarray, pen_rows: np.ndarray
) -> tuple[np.ndarray, list[int]]:
    """Each coalition's chord matrix (its parts' Hessians plus its penalty) inverted, and the
    coalitions whose matrix is numerically singular (their inverse left 0): coalitions
    (`membership`: coalitions x parts, 1 for a member) in slices of about `CHUNK_CELLS` cells
    at once, one by one only in a slice holding a singular matrix."""
    size = hessians[0].shape[0]
    flat = np.stack(hessians).reshape(len(hessians), -1)
    inverses, slow = np.zeros((len(membership), size, size)), []
    chunk = max(1, CHUNK_CELLS // (size * size))
    for start in range(0, len(membership), chunk):
        ids = range(start, min(start + chunk, len(membership)))
        stacked = (membership[start : start + len(ids)] @ flat).reshape(len(ids), size, size)
        stacked += pen_rows[start : start + len(ids)].reshape(len(ids), 1, -1) * np.eye(size)
        try:
            lower = np.linalg.inv(np.linalg.cholesky(stacked))
            inverses[start : start + len(ids)] = np.swapaxes(lower, 1, 2) @ lower
            continue
        except np.linalg.LinAlgError:
            pass
        # Imported here: SciPy's linear algebra adds about 20 MB to the RSS of every process
        # that imports this module (the API's, through the valuation modules), which never fits.
        from scipy.linalg import cho_factor, cho_solve

        for row, i in enumerate(ids):
            try:
                inverses[i] = cho_solve(cho_factor(stacked[row]), np.eye(size))
            except np.linalg.LinAlgError:
                slow.append(i)  # full Newton instead (`coalition_fits`)
    return inverses, slow


def _gradients(
    parts: Sequence[LogisticPart],
    betas: np.ndarray,
    coalitions: Sequence[Sequence[int]],
    *,
    single: bool = False,
) -> np.ndarray:
    """Log-likelihood gradients of many coalitions at their own coefficients: per part, one
    product for every coalition holding it (chunked); in float32 when `single`."""
    total = np.zeros_like(betas)
    count, outputs, dims = betas.shape
    for index, part in enumerate(parts):
        holders = np.asarray([k for k in range(count) if index in coalitions[k]], dtype=int)
        chunk = max(1, CHUNK_CELLS // max(len(part.x) * outputs, 1))
        for start in range(0, len(holders), chunk):
            ids = holders[start : start + chunk]
            flat = betas[ids].reshape(-1, dims)  # (coalitions x outputs) x features
            if single:
                x, weighted_t, y = part.single
                eta = (x @ flat.astype(np.float32).T).reshape(len(x), len(ids), outputs)
                residual = np.subtract(y[:, None, :], probabilities_in_place(eta), out=eta)
                moment = weighted_t @ residual.reshape(len(x), -1)  # (W X)ᵀ (Y − P)
                total[ids] += moment.T.reshape(len(ids), outputs, dims)
                continue
            eta = (part.x @ flat.T).reshape(len(part.x), len(ids), outputs)
            proba = probabilities_in_place(eta).reshape(len(part.x), -1)
            fitted = part.weighted_t @ proba  # features x (ids x outputs): (W X)ᵀ P
            total[ids] += part.label_moment - fitted.T.reshape(len(ids), outputs, dims)
    return total


def _solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(np.linalg.solve(matrix, rhs))
    except np.linalg.LinAlgError:
        return np.asarray(np.linalg.lstsq(matrix, rhs, rcond=None)[0])
