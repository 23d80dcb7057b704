"""Forward hooks that record hidden states at some sites of a model: the input of the first
block and the output of every block (h_0..h_L), or the input and output of every block part.
Used by extraction, by the runs with parts replaced and by architecture discovery. And one hook
that replaces a block's input (substitute_input), for the runs that start after a jump."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from jtc.model.adapters import Part

SIDES = ("in", "out")  # a part's recorded input and output


def hidden_input(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden-states argument of a module call (first positional, or by keyword)."""
    return args[0] if args else kwargs["hidden_states"]


def hidden_output(output) -> torch.Tensor:
    """The hidden states a module returned (alone, or first of a tuple)."""
    return output[0] if isinstance(output, tuple) else output


def substitute_input(states: Callable[[], torch.Tensor]):
    """A forward pre-hook (register it with with_kwargs=True) that replaces a module's
    hidden-states argument by `states()`, moved to that argument's device and dtype."""

    def hook(module, args, kwargs):
        hidden = hidden_input(args, kwargs)
        new = states().to(hidden.device, hidden.dtype)
        if args:
            return (new, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": new}

    return hook


class Recorder:
    """Forward hooks that keep, for each sequence of the batch, the value of some sites at one
    position (`index`: batch rows and their positions)."""

    def __init__(self, n_sites: int):
        self.index: tuple[torch.Tensor, torch.Tensor] | None = None
        self.states: list[torch.Tensor | None] = [None] * n_sites
        self.handles: list = []

    def _take(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.index is not None
        # a model spread over several GPUs (device_map) has blocks on different devices
        index = tuple(i.to(hidden.device) if torch.is_tensor(i) else i for i in self.index)
        return hidden[index].detach().float()

    def input_hook(self, site: int):
        def hook(module, args, kwargs):
            self.states[site] = self._take(hidden_input(args, kwargs))

        return hook

    def output_hook(self, site: int):
        def hook(module, args, output):
            self.states[site] = self._take(hidden_output(output))

        return hook

    def watch_input(self, module: nn.Module, site: int) -> None:
        self.handles.append(
            module.register_forward_pre_hook(self.input_hook(site), with_kwargs=True)
        )

    def watch_output(self, module: nn.Module, site: int) -> None:
        self.handles.append(module.register_forward_hook(self.output_hook(site)))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class StateRecorder(Recorder):
    """The input of block 0 (h_0) and the output of every block (h_1..h_L)."""

    def __init__(self, blocks: nn.ModuleList):
        super().__init__(len(blocks) + 1)
        self.watch_input(blocks[0], 0)
        for layer, block in enumerate(blocks, 1):
            self.watch_output(block, layer)


def part_sites(num_blocks: int, parts: Sequence[Part]) -> list[tuple[int, str, str]]:
    """(block 1..L, part name, "in" | "out") of every recorded part site, in file order."""
    return [(b, p.name, side) for b in range(1, num_blocks + 1) for p in parts for side in SIDES]


class PartRecorder(Recorder):
    """The input and output of every part of every block (sites in part_sites order)."""

    def __init__(self, blocks: nn.ModuleList, parts: Sequence[Part]):
        super().__init__(len(blocks) * len(parts) * len(SIDES))
        site = 0
        for block in blocks:
            for part in parts:
                first, last = part.modules(block)
                self.watch_input(first, site)
                self.watch_output(last, site + 1)
                site += 2
