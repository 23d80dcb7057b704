"""Shortcut maps trained by gradient descent, beside the closed-form mat and rrr of
jtc.shortcuts.closed_form:

- NJTC: h_l' ≈ h_l · A · B with A d × r, B r × d, trained jointly on the mean squared error;
- N-NJTC: the same after a batch normalisation of h_l (learned scale and shift; running
  statistics at evaluation) (Normalized Narrow Jump To Conclusions, arXiv 2409.14091);
- the tuned lens, trained through the model's decoder head, is jtc.shortcuts.lens (it trains
  with `train_module` too).

Each starts from the closed-form optimum of a least-squares objective on the rows it trains on
(jtc.settings.TrainSettings.warm_start; jtc.shortcuts.closed_form), not from a random point:

- NJTC from the reduced-rank regression (rrr) of the target on the source states: the optimum
  of its own objective, which gradient descent can then only refine by chance on held-out rows;
- N-NJTC with the running statistics set to the training rows' mean and variance (γ = 1), and
  A·B and the shift β from the reduced-rank regression, with an intercept, of the target on
  the standardised rows: the optimum of its objective at evaluation (running statistics).

With warm_start false they start as the methods' authors' do: torch.nn.Linear's random
initialisation.

Each pair (source, target) is trained on its own, from a seed derived from (seed, method,
source, target), so a map does not depend on which other pairs a job trains. A seeded part of
the training split is held out for early stopping: its loss is measured at the start (epoch
0) and after every epoch, training stops after `patience` epochs without a new best, and the
weights of the best held-out epoch (the start included) are kept. On CPU two runs with the same
seed and thread count give bit-identical maps.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from jtc.devices import job_device
from jtc.settings import TrainSettings
from jtc.shortcuts.closed_form import reduced_rank, reduced_rank_affine
from jtc.shortcuts.maps import DEFAULT_NORM_EPS

OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("cosine", "constant")
EVAL_ROWS = 4096  # held-out rows evaluated at once


@dataclass
class TrainResult:
    tensors: dict[str, np.ndarray]  # the map's parts, as jtc.shortcuts.maps stores them
    train_loss: list[float] = field(default_factory=list)  # per epoch, over its batches
    holdout_loss: list[float] = field(default_factory=list)  # at the start, then per epoch
    best_epoch: int = 0  # 0: the starting weights were never beaten
    seconds: float = 0.0  # in all, the closed-form start included
    start_seconds: float = 0.0  # computing the closed-form start

    def summary(self) -> dict[str, float | int]:
        """Epochs and losses (not the time taken: map files stay identical from run to run)."""
        return {
            "epochs": len(self.train_loss),
            "best_epoch": self.best_epoch,
            "final_train_loss": self.train_loss[-1] if self.train_loss else math.nan,
            "best_holdout_loss": min(self.holdout_loss) if self.holdout_loss else math.nan,
        }


def pair_seed(seed: int, method: str, source: int, target: int) -> int:
    """A seed of its own for each (method, source, target), stable across runs and platforms."""
    entropy = [seed, zlib.crc32(method.encode()), source, target]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> 1)


def _uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=generator))


class LowRankMap(nn.Module):
    """h ↦ up(down(norm(h))): NJTC without the norm, N-NJTC with it."""

    def __init__(self, width: int, rank: int, normalise: bool, generator: torch.Generator):
        super().__init__()
        self.norm = nn.BatchNorm1d(width, eps=DEFAULT_NORM_EPS) if normalise else None
        # torch.nn.Linear's default initialisation, drawn from our own generator
        self.down = nn.Linear(width, rank, bias=False)
        self.up = nn.Linear(rank, width, bias=False)
        self.down.weight = _uniform((rank, width), 1 / math.sqrt(width), generator)
        self.up.weight = _uniform((width, rank), 1 / math.sqrt(rank), generator)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            h = self.norm(h)
        return self.up(self.down(h))

    @torch.no_grad()
    def start_at(self, x: np.ndarray, y: np.ndarray) -> None:
        """Start from the closed-form optimum on the rows x, y (module docstring): without the
        norm, the reduced-rank regression of y on x; with it, running statistics from x (γ = 1)
        and down, up and β from the reduced-rank regression with an intercept of y on the
        standardised x. At evaluation the map is then exactly that regression. Computed in
        float64 by jtc.shortcuts.closed_form's torch path on the module's device (the GPU when it
        trains there)."""
        rank, device = self.down.weight.shape[0], self.down.weight.device
        if self.norm is None:
            down, up = reduced_rank(x, y, rank, device)
        else:
            x = np.asarray(x, dtype=np.float64)
            mean = x.mean(0)
            var = x.var(0, ddof=1)  # unbiased, as torch's running variance (≥ 2 rows trained)
            z = (x - mean) / np.sqrt(var + self.norm.eps)
            down, up, offset = reduced_rank_affine(z, y, rank, device)
            # β with down β = offset (minimum norm): the intercept, put through down and up
            down_t = torch.as_tensor(down, device=device)
            shift = torch.linalg.pinv(down_t) @ torch.as_tensor(offset, device=device)
            for name, value in (
                ("running_mean", mean),
                ("running_var", var),
                ("weight", np.ones_like(mean)),
                ("bias", shift),
            ):
                getattr(self.norm, name).copy_(torch.as_tensor(value))
        self.down.weight.copy_(torch.as_tensor(down))
        self.up.weight.copy_(torch.as_tensor(up))

    def tensors(self) -> dict[str, np.ndarray]:
        return {
            name: t.detach().cpu().numpy()
            for name, t in self.state_dict().items()
            if not name.endswith("num_batches_tracked")
        }


def _batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Batches of `size` rows; a trailing batch of one row joins the one before it (batch
    normalisation cannot train on a single row)."""
    batches = list(torch.split(rows, size))
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches[-2:] = [torch.cat(batches[-2:])]
    return batches


def _optimizer(module: nn.Module, settings: TrainSettings) -> torch.optim.Optimizer:
    params = [p for p in module.parameters() if p.requires_grad]
    if settings.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=settings.learning_rate,
            momentum=0.9,
            nesterov=True,
            weight_decay=settings.weight_decay,
        )
    return torch.optim.Adam(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)


def held_out_rows(
    n: int, fraction: float, generator: torch.Generator, groups: np.ndarray | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(held-out rows, rows trained on) of rows 0..n-1: a seeded `fraction` of them (at least
    one held out, at least two trained on, when the fraction is above 0). With `groups` (each
    row's sentence) where a sentence has several rows, the share is drawn over the sentences and
    a sentence's rows stay together: rows of one sentence are correlated, and early stopping on
    rows whose sentence was trained on would reward memorising it."""

    def count(total: int) -> int:
        return max(0, min(total - 2, max(1, round(total * fraction)))) if fraction > 0 else 0

    unique, group_of = (None, None) if groups is None else np.unique(groups, return_inverse=True)
    if unique is None or len(unique) == n:
        order = torch.randperm(n, generator=generator)
        n_hold = count(n)
        holdout, train_rows = order[:n_hold], order[n_hold:]
    else:
        order = torch.randperm(len(unique), generator=generator).numpy()
        held = np.zeros(len(unique), dtype=bool)
        held[order[: count(len(unique))]] = True
        holdout = torch.from_numpy(np.flatnonzero(held[group_of]))
        train_rows = torch.from_numpy(np.flatnonzero(~held[group_of]))
    if len(train_rows) < 2:
        raise ValueError(f"{n} training rows are too few to train on (need at least 2)")
    return holdout, train_rows


def train_module(
    module: nn.Module,
    loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    start_from: tuple[np.ndarray, np.ndarray],
    settings: TrainSettings,
    generator: torch.Generator,
    groups: np.ndarray | None = None,
) -> TrainResult:
    """Minibatch training of `module` (a map with `start_at(x, y)` and `tensors()`: LowRankMap,
    jtc.shortcuts.lens.AffineTranslator) on rows 0..n-1 of `start_from` = (x, y); `loss_of(module,
    rows)` is the mean loss over those rows. A seeded share of the rows (of the sentences, with
    `groups`: each row's sentence; held_out_rows) is held out for early stopping. With
    settings.warm_start, the module starts at its closed form on the rows trained on (sorted row
    numbers) before the held-out loss of that start is measured (epoch 0). The result holds the
    trained module's tensors."""
    if settings.optimizer not in OPTIMIZERS or settings.schedule not in SCHEDULES:
        raise ValueError(
            f"optimizer '{settings.optimizer}', schedule '{settings.schedule}': expected one of "
            f"{OPTIMIZERS} and one of {SCHEDULES}"
        )
    start = time.perf_counter()
    x, y = start_from
    holdout, train_rows = held_out_rows(len(x), settings.holdout_fraction, generator, groups)
    n_hold = len(holdout)
    if settings.warm_start:
        rows = np.sort(train_rows.numpy())
        module.start_at(x[rows], y[rows])
    start_seconds = time.perf_counter() - start
    optimizer = _optimizer(module, settings)
    steps = settings.max_epochs * len(_batches(train_rows, settings.batch_size))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        (lambda step: 0.5 * (1 + math.cos(math.pi * step / steps)))
        if settings.schedule == "cosine"
        else (lambda step: 1.0),
    )
    result = TrainResult(tensors={}, start_seconds=start_seconds)

    def held_out_loss() -> float:
        module.eval()
        with torch.no_grad():
            total = sum(
                float(loss_of(module, rows)) * len(rows) for rows in holdout.split(EVAL_ROWS)
            )
        return total / n_hold

    best = math.inf
    if n_hold:
        best = held_out_loss()
        result.holdout_loss.append(best)
    best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    waited = 0
    for epoch in range(1, settings.max_epochs + 1):
        module.train()
        shuffled = train_rows[torch.randperm(len(train_rows), generator=generator)]
        total = 0.0
        for rows in _batches(shuffled, settings.batch_size):
            loss = loss_of(module, rows)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(rows)
        result.train_loss.append(total / len(train_rows))
        if not n_hold:
            result.best_epoch = epoch
            continue
        result.holdout_loss.append(held_out_loss())
        if result.holdout_loss[-1] < best:
            best, result.best_epoch, waited = result.holdout_loss[-1], epoch, 0
            best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        else:
            waited += 1
            if waited >= settings.patience:
                break
    if n_hold:
        module.load_state_dict(best_state)
    module.eval()
    result.seconds = time.perf_counter() - start
    result.tensors = module.tensors()
    return result


def as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.tensor(np.asarray(array, dtype=np.float32), device=device)


def train_low_rank(
    x: np.ndarray,
    y: np.ndarray,
    *,
    rank: int,
    normalise: bool,
    settings: TrainSettings,
    seed: int,
    device: str | torch.device | None = None,
    groups: np.ndarray | None = None,
) -> TrainResult:
    """NJTC (normalise False) or N-NJTC (True) from states x (n, d) to y (n, d), by MSE, from
    the closed-form start of the module docstring (or torch's random one: warm_start false);
    `groups`: each row's sentence, for the held-out share (train_module)."""
    device = job_device() if device is None else torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    module = LowRankMap(x.shape[1], rank, normalise, generator).to(device)
    xs, ys = as_tensor(x, device), as_tensor(y, device)

    def loss_of(net: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(device)
        return nn.functional.mse_loss(net(xs[rows]), ys[rows])

    return train_module(module, loss_of, (x, y), settings, generator, groups)
