"""A decoder head's transform made of several of the model's own modules: the final norm, then
the head's modules in order, then (for a head whose activation is a function call, not a
module) one module run whole up to the input of its unembedding."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class _Captured(Exception):
    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.value = value


class HeadChain(nn.Module):
    """transform(h) = capture-input(module_k(...module_1(h))). `unembedding` is not registered
    as a sub-module: only the forward of `capture` reaches it, and is stopped at its input."""

    def __init__(
        self, steps: Sequence[nn.Module], capture: nn.Module | None, unembedding: nn.Module
    ):
        super().__init__()
        self.steps = nn.ModuleList(steps)
        self.capture = capture
        object.__setattr__(self, "_unembedding", unembedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            x = step(x)
        if self.capture is None:
            return x

        def stop(_module, args):
            raise _Captured(args[0])

        handle = self._unembedding.register_forward_pre_hook(stop)
        try:
            self.capture(x)
        except _Captured as captured:
            return captured.value
        finally:
            handle.remove()
        raise RuntimeError("the head's module never reached its unembedding")
