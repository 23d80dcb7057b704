"""ReplaceMe's second objective (arXiv 2505.02819), the depth-pruning variant
`replaceme_cosine` (torch): the d × d transform T of replaceme, h_{i+n} := r_i + X_i T, fitted
not by least squares but by Adam on the mean cosine distance over the calibration tokens,

    T = argmin  mean_t  1 - cos(X_t T + r_t, h_{i+n, t}),

started from replaceme's least-squares T (jtc.pruning.fits.fit_replaceme). X_i is block i's
feed-forward output before its residual add and r_i = h_i - X_i the stream it is added to. T
folds into block i's MLP exactly as replaceme's does (jtc.pruning.mlp_fold), so the pruned model
is a standard checkpoint.

Unlike the least-squares fit, the cosine one needs the token rows themselves, not sums: one more
pass over the calibration sentences keeps X_i at every start i and h_l at every start and end
of a span, float32 on the CPU (`cosine_rows`; memory: (starts + states + 1) × tokens × d × 4
bytes, logged). The fit is deterministic: the minibatch order comes from a generator seeded by
SEED and the span, and torch's deterministic algorithms are on while it runs.

ReplaceMe's own code (mts-ai/ReplaceMe, cosine_dist.py and utils.adam_method) starts T at the
identity and trains it with Adam, learning rate 1e-4, 10 epochs of shuffled minibatches of 1024
tokens, float32; its default loss is 1 - cos(X T, h_{i+n} - r_i) (r_i moved to the target to
save memory), its `accurate` mode the objective above, which jtc uses, from the least-squares T.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from jtc.data.extract import padded_batches
from jtc.logs import Progress
from jtc.model.adapters import Adapter
from jtc.pruning.fits import SpanFit, SpanGrams, fit_replaceme
from jtc.pruning.sums import counted, every_state
from jtc.settings import CalibrationSettings, CosineSettings

log = logging.getLogger(__name__)
VARIANT = "replaceme_cosine"
SEED = 0  # with the span's start and length, the seed of each fit's minibatch order
# rows scored at a time when measuring a loss over every calibration token
CHUNK = 4096


@dataclass(frozen=True)
class CosineRows:
    """Every calibration token's rows that the cosine fits need, float32 on the CPU:
    `ffn[i]` X_i (block i's feed-forward output) for every start i, `states[l]` h_l for every
    start and end of a span, each (tokens, d)."""

    ffn: dict[int, torch.Tensor]
    states: dict[int, torch.Tensor]

    @property
    def tokens(self) -> int:
        return len(next(iter(self.states.values())))

    def nbytes(self) -> int:
        kept = [*self.ffn.values(), *self.states.values()]
        return sum(t.numel() * t.element_size() for t in kept)

    def span(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(X_i, r_i = h_i - X_i, h_{i+n}) of a span."""
        x = self.ffn[start]
        return x, self.states[start] - x, self.states[start + length]


@torch.inference_mode()
def cosine_rows(
    model: nn.Module,
    adapter: Adapter,
    inputs: list[np.ndarray],
    spans: Sequence[tuple[int, int]],
    batch_size: int,
    pad_id: int,
    skip_first_token: bool = False,
) -> CosineRows:
    """The rows of every (start, length) in `spans` at every token of the sequences `inputs`
    (token ids; with `skip_first_token` every one but each sequence's first, as the sums:
    jtc.pruning.sums.counted), from one pass with jtc.pruning.sums.every_state's hooks: only
    the layers the spans need are kept."""
    starts = sorted({i for i, _ in spans})
    layers = sorted({i for i, _ in spans} | {i + n for i, n in spans})
    if starts and starts[0] < 1:
        raise ValueError(f"{VARIANT} needs start >= 1: block 0 (the embeddings) has no MLP")
    backbone = adapter.backbone(model)
    device = next(model.parameters()).device
    ffn: dict[int, list[torch.Tensor]] = {i: [] for i in starts}
    states: dict[int, list[torch.Tensor]] = {k: [] for k in layers}
    progress = Progress(len(inputs), f"{VARIANT} rows", "sentences")
    with every_state(model, adapter, ffn=True) as kept:
        for rows, ids, mask in padded_batches(inputs, batch_size, pad_id):
            mask = mask.to(device)
            backbone(input_ids=ids.to(device), attention_mask=mask, use_cache=False)
            real = counted(mask, skip_first_token).bool()
            for i in starts:
                ffn[i].append(kept["ffn"][i - 1][real].float().cpu())
            for k in layers:
                states[k].append(kept["states"][k][real].float().cpu())
            progress.update(len(rows))
    found = CosineRows(ffn=_gathered(ffn), states=_gathered(states))
    log.info(
        "%s rows: X at %d starts and h at %d layers, %d tokens, %.2f GB float32",
        VARIANT,
        len(starts),
        len(layers),
        found.tokens if layers else 0,
        found.nbytes() / 1e9,
    )
    return found


def _gathered(parts: dict[int, list[torch.Tensor]]) -> dict[int, torch.Tensor]:
    """Each layer's batches joined into one (tokens, d) tensor, one layer at a time, each
    layer's batches freed once joined: the memory peaks at every row plus one layer's, not
    twice every row."""
    return {k: torch.cat(parts.pop(k)) for k in list(parts)}


def _unit_rows(v: torch.Tensor) -> torch.Tensor:
    """Each row over its norm (a zero row stays zero)."""
    return v / v.norm(dim=1, keepdim=True).clamp(min=torch.finfo(v.dtype).tiny)


@torch.no_grad()
def span_losses(
    x: torch.Tensor, r: torch.Tensor, y: torch.Tensor, t: torch.Tensor
) -> tuple[float, float]:
    """(||X T + r - h||² / ||h||², mean 1 - cos(X T + r, h)) over every row (a zero row counts
    as orthogonal): the calibration loss of jtc.pruning.fits.SpanFit and the cosine objective,
    summed in float64 (X T + r in float32, as the fit computes it)."""
    t = t.to(torch.float32)
    error = norm = distance = 0.0
    for k in range(0, len(x), CHUNK):
        rows = slice(k, k + CHUNK)
        target = y[rows]
        pred = torch.addmm(r[rows], x[rows], t)
        error += float(((pred - target).double() ** 2).sum())
        norm += float((target.double() ** 2).sum())
        cos = (_unit_rows(pred.double()) * _unit_rows(target.double())).sum(1)
        distance += float((1.0 - cos).sum())
    return error / norm, distance / max(len(x), 1)


@contextmanager
def _deterministic() -> Iterator[None]:
    """torch's deterministic algorithms on (warnings only, where an operation has none), as
    they were afterwards."""
    was, warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)


def adam_transform(
    x: torch.Tensor,
    r: torch.Tensor,
    y: torch.Tensor,
    start: np.ndarray,
    settings: CosineSettings,
    seed: int,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """T (d × d, float64) minimising mean 1 - cos(X T + r, y) over the rows, by Adam (float32)
    from `start`, `settings.epochs` passes of minibatches of `settings.batch_tokens` rows in an
    order drawn from a generator seeded by `seed`."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.tensor(start, dtype=torch.float32, device=device, requires_grad=True)
    # fused: one kernel for the d² update (on the CPU the elementwise passes of the default
    # implementation cost more than the minibatch's matrix product)
    optimizer = torch.optim.Adam([t], lr=settings.learning_rate, fused=True)
    target = _unit_rows(y)  # cos(p, y) = p·ŷ / ||p||: ŷ once
    with _deterministic():
        for _ in range(settings.epochs):
            order = torch.randperm(len(x), generator=generator)
            for rows in order.split(settings.batch_tokens):
                xb, rb, yb = (v[rows].to(device) for v in (x, r, target))
                pred = torch.addmm(rb, xb, t)
                norms = pred.norm(dim=1).clamp(min=torch.finfo(pred.dtype).tiny)
                loss = 1.0 - ((pred * yb).sum(1) / norms).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    return t.detach().to("cpu", torch.float64).numpy()


def fit_cosine_span(
    grams: SpanGrams,
    rows: CosineRows,
    start: int,
    length: int,
    settings: CosineSettings,
    ridge: float = 0.0,
    device: torch.device | str = "cpu",
) -> tuple[SpanFit, SpanFit]:
    """(replaceme_cosine's fit of the span, the least-squares fit it started from, its
    cosine_distance measured): T by Adam from replaceme's least-squares T (`ridge`: that fit's
    relative ridge), its calibration loss ||ĥ_{i+n} - h_{i+n}||² / ||h_{i+n}||² and mean
    cosine distance over the calibration tokens."""
    least = fit_replaceme(grams, start, length, rank=1, ridge=ridge)
    x, r, y = rows.span(start, length)
    ls_loss, ls_distance = span_losses(x, r, y, torch.from_numpy(least.tensors["weight"].T))
    seed = SEED + 1000 * length + start
    t = adam_transform(x, r, y, least.tensors["weight"].T, settings, seed, device)
    loss, distance = span_losses(x, r, y, torch.from_numpy(t))
    fit = SpanFit(VARIANT, start, length, {"weight": t.T.copy()}, "adam", loss, distance)
    measured = SpanFit(
        least.variant, start, length, least.tensors, least.solver, ls_loss, ls_distance
    )
    return fit, measured


def cosine_fits(
    model: nn.Module,
    adapter: Adapter,
    inputs: list[np.ndarray],
    grams: SpanGrams,
    spans: Sequence[tuple[int, int]],
    settings: CalibrationSettings,
    batch_size: int,
    pad_id: int,
) -> list[SpanFit]:
    """replaceme_cosine's fit of every (start, length) of `spans`, in that order: one more pass
    over the calibration sentences `inputs` for the rows (`cosine_rows`), then each span's
    Adam fit on the model's device (`settings.cosine`; `settings.ridge`: the least-squares
    start's relative ridge). Logs each span's cosine distance and calibration loss
    against the least-squares start's."""
    began = time.perf_counter()
    rows = cosine_rows(model, adapter, inputs, spans, batch_size, pad_id, settings.skip_first_token)
    device = next(model.parameters()).device
    fits, least_squares = [], []
    progress = Progress(len(spans), f"{VARIANT} fits", "spans")
    for start, length in spans:
        fit, least = fit_cosine_span(
            grams, rows, start, length, settings.cosine, settings.ridge, device
        )
        log.debug(
            "%s start %d length %d: cosine distance %.6g (least squares %.6g), calibration "
            "loss %.6g (least squares %.6g)",
            VARIANT,
            start,
            length,
            fit.cosine_distance,
            least.cosine_distance,
            fit.loss,
            least.loss,
        )
        fits.append(fit)
        least_squares.append(least)
        progress.update(1)
    if fits:
        log.info(
            "%s: %d spans fitted in %.1f s; mean over the spans of the cosine distance %.6g "
            "(least squares %.6g) and of the calibration loss %.6g (least squares %.6g)",
            VARIANT,
            len(fits),
            time.perf_counter() - began,
            np.mean([f.cosine_distance for f in fits]),
            np.mean([f.cosine_distance for f in least_squares]),
            np.mean([f.loss for f in fits]),
            np.mean([f.loss for f in least_squares]),
        )
    return fits
