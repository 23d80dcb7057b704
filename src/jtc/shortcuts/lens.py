"""The tuned lens (Belrose et al. 2023, arXiv 2303.08112): an affine translator h + W h + b from
a layer's states into the last layer, trained on KL(final ‖ translated) through the model's own
decoder head, with jtc.shortcuts.train's `train_module` (held-out early stopping, one seed per
layer pair).

It starts from the least-squares affine map of the last layer's states on the source states
(h_L ≈ h A + c: I + W = A^T, b = c), the "mat with an intercept" that KL then tunes, or with
jtc.settings.TrainSettings.warm_start false from the identity (W = 0, b = 0, the logit lens).
`fit_tuned_lens` is the one call that fits it from every source layer into a map file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from jtc.model.head import Head
from jtc.model.scoring import Reference, final_reference
from jtc.settings import TrainSettings
from jtc.shortcuts.closed_form import least_squares_affine
from jtc.shortcuts.fit import map_metadata, train_pairs
from jtc.shortcuts.train import TrainResult, as_tensor, train_module


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
        jtc.shortcuts.closed_form's torch path on the module's device."""
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


def lens_loss(head: Head, reference: Reference, states: torch.Tensor, rows: torch.Tensor):
    """Mean KL(final ‖ D(states)) over `rows`, from the O(width) summary of the final
    prediction: KL = Σ p ln p − (f·Σ p W + Σ p b) + logsumexp(W f + b), f = transform(state)."""
    features = head.features(states)
    expected = (features * reference.expected_weight[rows]).sum(1) + reference.expected_bias[rows]
    log_norm = torch.logsumexp(head.unembed(features), dim=1)
    return (reference.neg_entropy[rows] - expected + log_norm).mean()


def lens_reference(head: Head, final_states: np.ndarray) -> Reference:
    """What the tuned lens's loss needs of the final prediction D(h_L)
    (jtc.model.scoring.Reference), as plain tensors on the head's device; the same for
    every source layer of a job."""
    reference = final_reference(head, final_states, 1)
    # inference-mode tensors cannot take part in autograd: plain copies, on the head's device
    return Reference(
        **{
            f.name: getattr(reference, f.name).to(head.device).clone()
            for f in dataclasses.fields(Reference)
        }
    )


def train_tuned_lens(
    x: np.ndarray,
    head: Head,
    final_states: np.ndarray,
    *,
    settings: TrainSettings,
    seed: int,
    reference: Reference | None = None,
    groups: np.ndarray | None = None,
) -> TrainResult:
    """The translator from states x (n, d) to the last layer, trained by KL to the final
    prediction D(h_L) at the same positions (final_states: h_L); on the head's device.
    `reference`: lens_reference(head, final_states), when the caller has it already; `groups`:
    each row's sentence, for the held-out share (jtc.shortcuts.train.train_module)."""
    for param in [*(head.transform.parameters() if head.transform else []), head.weight]:
        param.requires_grad_(False)
    if reference is None:
        reference = lens_reference(head, final_states)
    generator = torch.Generator().manual_seed(seed)
    module = AffineTranslator(x.shape[1]).to(head.device)
    xs = as_tensor(x, head.device)

    def loss_of(net: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(head.device)
        return lens_loss(head, reference, net(xs[rows]), rows)

    return train_module(module, loss_of, (x, final_states), settings, generator, groups)


def fit_tuned_lens(
    method: str,
    states: Sequence[np.ndarray],
    out: str | Path,
    head: Head,
    *,
    settings: TrainSettings,
    seed: int,
    threads: int,
    model: str,
    corpus: str,
    groups: np.ndarray | None = None,
) -> None:
    """Train `method` (the tuned lens; config training.<method>: `settings`) from the training
    states h_0..h_L of every layer (`states`, rows aligned) through `head`, into the last layer,
    each pair from its own seed, and write the maps to `out` (as
    jtc.shortcuts.fit.fit_method does, `groups` likewise); on the head's device. The final
    prediction is decoded once for every source layer."""
    meta = map_metadata(states, model, corpus, method, groups)
    torch.set_num_threads(threads)
    last = len(states) - 1
    reference = lens_reference(head, states[last])
    meta.update(seed=seed, settings=dataclasses.asdict(settings))

    def train(source: int, target: int, pair: int) -> TrainResult:
        # the final prediction is read from the last layer
        return train_tuned_lens(
            states[source],
            head,
            states[target],
            settings=settings,
            seed=pair,
            reference=reference,
            groups=groups,
        )

    train_pairs(method, last, out, meta, "last", seed, train)
