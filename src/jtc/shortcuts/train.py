"""Shortcut maps trained by gradient descent, beside the closed-form mat and rrr of
jtc.shortcuts.closed_form:

- NJTC: h_l' ≈ h_l · A · B with A d × r, B r × d, trained jointly on the mean squared error;
- N-NJTC: the same after a batch normalisation of h_l (learned scale and shift; running
  statistics at evaluation) (Normalized Narrow Jump To Conclusions, arXiv 2409.14091);
- a tuned-lens style translator h + W h + b into the last layer, trained on KL(final ‖
  translated) through the model's own decoder head (Belrose et al. 2023, arXiv 2303.08112).

Each starts from the closed-form optimum of a least-squares objective on the rows it trains on
(TrainSettings.warm_start; jtc.shortcuts.closed_form), not from a random point:

- NJTC from the reduced-rank regression (rrr) of the target on the source states: the optimum
  of its own objective, which gradient descent can then only refine by chance on held-out rows;
- N-NJTC with the running statistics set to the training rows' mean and variance (γ = 1), and
  A·B and the shift β from the reduced-rank regression, with an intercept, of the target on
  the standardised rows: the optimum of its objective at evaluation (running statistics);
- the tuned lens from the least-squares affine map of the last layer's states on the source
  states (h_L ≈ h A + c: I + W = A^T, b = c), the "mat with an intercept" that KL then tunes.

With warm_start false they start as the methods' authors' do: torch.nn.Linear's random
initialisation, and the identity (W = 0, b = 0, the logit lens).

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
from dataclasses import dataclass, field, fields

import numpy as np
import torch
from torch import nn

from jtc.evaluation.decode import Head, Reference, final_reference
from jtc.shortcuts.closed_form import least_squares_affine, reduced_rank, reduced_rank_affine
from jtc.shortcuts.maps import DEFAULT_NORM_EPS

OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("cosine", "constant")
EVAL_ROWS = 4096  # held-out rows evaluated at once


@dataclass(frozen=True)
class TrainSettings:
    """How a map is trained (config training.<method>). No defaults here: each method's are in
    jtc.shortcuts.methods (for_method), and the workflow's checked config has them filled in."""

    optimizer: str
    """One of OPTIMIZERS."""
    learning_rate: float
    max_epochs: int
    batch_size: int
    holdout_fraction: float
    """Share of the rows held out for early stopping."""
    patience: int
    """Epochs without a better held-out loss before training stops."""
    weight_decay: float
    schedule: str
    """The learning rate schedule, one of SCHEDULES."""
    warm_start: bool
    """Start from the closed-form optimum (module docstring), else from random maps."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer '{self.optimizer}': expected one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule '{self.schedule}': expected one of {SCHEDULES}")

    @classmethod
    def from_config(cls, block: dict) -> TrainSettings:
        """The settings in a config block; its other keys (rank, targets) are not training's."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in block.items() if k in names})

    @classmethod
    def for_method(cls, method: str, **changes) -> TrainSettings:
        """A method's default settings (jtc.shortcuts.methods), with `changes`."""
        from jtc.shortcuts.methods import METHODS

        return cls.from_config({**METHODS[method].defaults, **changes})


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


def default_rank(width: int) -> int:
    """NJTC's rank: floor(d / 100), at least 1."""
    return max(1, width // 100)


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


class AffineTranslator(nn.Module):
    """h ↦ h + W h + b, created at the identity (W = 0, b = 0)."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width, width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + nn.functional.linear(h, self.weight, self.bias)

    @torch.no_grad()
    def start_at(self, x: np.ndarray, y: np.ndarray) -> None:
        """Start from the least-squares affine map y ≈ x A + c on these rows: I + W = A^T,
        b = c (W = A^T - I is formed in float64 and then rounded); computed by
        jtc.shortcuts.closed_form's torch
        path on the module's device."""
        weight, bias = least_squares_affine(x, y, self.weight.device)  # torch, float64
        self.weight.copy_(torch.as_tensor(weight - np.eye(len(weight), weight.shape[1])))
        self.bias.copy_(torch.as_tensor(bias))

    def tensors(self) -> dict[str, np.ndarray]:
        """Stored as one affine map: weight I + W, bias b."""
        weight = self.weight.detach().cpu().numpy()
        return {
            "weight": weight + np.eye(len(weight), dtype=weight.dtype),
            "bias": self.bias.detach().cpu().numpy(),
        }


def _device(device: str | torch.device | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


def train_module(
    module: nn.Module,
    loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    n: int,
    settings: TrainSettings,
    generator: torch.Generator,
    start_at: Callable[[np.ndarray], None] | None = None,
) -> TrainResult:
    """Minibatch training of `module` on rows 0..n-1; `loss_of(module, rows)` is the mean loss
    over those rows. A seeded share of the rows is held out for early stopping. `start_at`, if
    given, sets the module's starting point from the rows trained on (sorted row numbers)
    before the held-out loss of that start is measured (epoch 0)."""
    start = time.perf_counter()
    order = torch.randperm(n, generator=generator)
    n_hold = 0
    if settings.holdout_fraction > 0:  # at least one row held out, at least two trained on
        n_hold = min(n - 2, max(1, round(n * settings.holdout_fraction)))
    if n - n_hold < 2:
        raise ValueError(f"{n} training rows are too few to train on (need at least 2)")
    holdout, train_rows = order[:n_hold], order[n_hold:]
    if start_at is not None:
        start_at(np.sort(train_rows.numpy()))
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
    return result


def _as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
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
) -> TrainResult:
    """NJTC (normalise False) or N-NJTC (True) from states x (n, d) to y (n, d), by MSE, from
    the closed-form start of the module docstring (or torch's random one: warm_start false)."""
    device = _device(device)
    generator = torch.Generator().manual_seed(seed)
    module = LowRankMap(x.shape[1], rank, normalise, generator).to(device)
    xs, ys = _as_tensor(x, device), _as_tensor(y, device)

    def loss_of(net: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(device)
        return nn.functional.mse_loss(net(xs[rows]), ys[rows])

    def start_at(rows: np.ndarray) -> None:
        module.start_at(x[rows], y[rows])

    start = start_at if settings.warm_start else None
    result = train_module(module, loss_of, len(x), settings, generator, start)
    result.tensors = module.tensors()
    return result


def lens_loss(head: Head, reference: Reference, states: torch.Tensor, rows: torch.Tensor):
    """Mean KL(final ‖ D(states)) over `rows`, from the O(width) summary of the final
    prediction: KL = Σ p ln p − (f·Σ p W + Σ p b) + logsumexp(W f + b), f = transform(state)."""
    features = head.features(states)
    expected = (features * reference.expected_weight[rows]).sum(1) + reference.expected_bias[rows]
    log_norm = torch.logsumexp(head.unembed(features), dim=1)
    return (reference.neg_entropy[rows] - expected + log_norm).mean()


def lens_reference(head: Head, final_states: np.ndarray) -> Reference:
    """What the tuned lens's loss needs of the final prediction D(h_L)
    (jtc.evaluation.decode.Reference),
    as plain tensors on the head's device; the same for every source layer of a job."""
    reference = final_reference(head, final_states, 1)
    # inference-mode tensors cannot take part in autograd: plain copies, on the head's device
    return Reference(
        **{f.name: getattr(reference, f.name).to(head.device).clone() for f in fields(Reference)}
    )


def train_tuned_lens(
    x: np.ndarray,
    head: Head,
    final_states: np.ndarray,
    *,
    settings: TrainSettings,
    seed: int,
    reference: Reference | None = None,
) -> TrainResult:
    """The translator from states x (n, d) to the last layer, trained by KL to the final
    prediction D(h_L) at the same positions (final_states: h_L); on the head's device.
    `reference`: lens_reference(head, final_states), when the caller has it already."""
    for param in [*(head.transform.parameters() if head.transform else []), head.weight]:
        param.requires_grad_(False)
    if reference is None:
        reference = lens_reference(head, final_states)
    generator = torch.Generator().manual_seed(seed)
    module = AffineTranslator(x.shape[1]).to(head.device)
    xs = _as_tensor(x, head.device)

    def loss_of(net: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(head.device)
        return lens_loss(head, reference, net(xs[rows]), rows)

    def start_at(rows: np.ndarray) -> None:
        module.start_at(x[rows], final_states[rows])

    start = start_at if settings.warm_start else None
    result = train_module(module, loss_of, len(x), settings, generator, start)
    result.tensors = module.tensors()
    return result
