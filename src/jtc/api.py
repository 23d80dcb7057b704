"""Reuse fitted shortcuts in your own code.

from jtc.api import Lens, Shortcuts

mat = Shortcuts.from_results("results", "smollm2", "news", "mat")
h30 = mat.apply(h10, source=10)              # (..., 576) states after layer 10 -> layer 30
                                             # (numpy, or torch on the tensor's device)
mat.export("shared/smollm2-news-mat")        # safetensors + description.json
mat = Shortcuts.load("shared/smollm2-news-mat")

lens = Lens.from_results("results", "smollm2", "news")   # the cached model, id and mat
lens = Lens.load("path/or/hub-id", ["id", "shared/smollm2-news-mat"])  # any model, exported maps
table = lens.predictions("The river flows into the", k=5) # top-5 per method, layer, token
lens.figure("The river flows into the", "lens.png", stat="kl")  # layer × token, per method
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from jtc import paths
from jtc.evaluation.lens_statistics import (
    LENS_COLUMNS,
    LENS_STATS,
    TRAJECTORY_COLUMNS,
    lens_statistic,
)
from jtc.files.io import atomic_dir, read_json, read_table
from jtc.model.sources import shareable_source
from jtc.shortcuts.maps import ShortcutMap, load_map, read_metadata
from jtc.shortcuts.results import results_problem

MAP_NAME = "maps.safetensors"  # an export's map file
EXPORT_FORMAT = "jtc-shortcuts-v2"  # v1: one map file per source layer


class ShortcutMismatch(ValueError):
    """Shortcuts applied to a model (or states) they were not fitted for."""


@dataclass
class Shortcuts:
    """One method's maps from every layer l to every later layer, for one model and corpus.

    `description` holds model, corpus, method, num_layers, hidden_size and architecture; `path`
    is the method's map file (jtc.shortcuts.maps; none for id, the identity)."""

    description: dict[str, Any]
    path: Path | None = None
    _cache: dict[tuple[int, int], ShortcutMap] = field(default_factory=dict, repr=False)
    _modules: dict[tuple, Any] = field(default_factory=dict, repr=False)  # to_torch, by device

    @classmethod
    def identity(cls, info: dict[str, Any]) -> Shortcuts:
        """id, the identity (the logit lens), for a model described by `info`."""
        keys = ("num_layers", "hidden_size", "architecture")
        described = {k: info[k] for k in keys}
        return cls({"model": info.get("name", "model"), "method": "id", **described})

    @property
    def method(self) -> str:
        return self.description["method"]

    @property
    def num_layers(self) -> int:
        return int(self.description["num_layers"])

    @classmethod
    def from_results(
        cls, results: str | Path, model: str, corpus: str, method: str = "mat"
    ) -> Shortcuts:
        """The maps a workflow run fitted, from its results folder; an error names what the
        folder holds when it lacks them."""
        from jtc.shortcuts.methods import METHODS

        if method not in METHODS:
            raise ValueError(f"unknown method '{method}': one of {', '.join(METHODS)}")
        problem = results_problem(results, model, corpus, method)
        if problem:
            raise FileNotFoundError(problem)
        info = read_json(paths.under(results, paths.MODEL, model=model) / "info.json")
        description = {
            "model": model,
            "corpus": corpus,
            "method": method,
            "num_layers": info["num_layers"],
            "hidden_size": info["hidden_size"],
            "architecture": info["architecture"],
            "model_source": info.get("source"),
        }
        if method == "id":
            return cls(description)
        return cls(
            description, paths.under(results, paths.MAP, model=model, corpus=corpus, method=method)
        )

    @classmethod
    def load(cls, folder: str | Path) -> Shortcuts:
        """Shortcuts exported with `export`."""
        folder = Path(folder)
        description = read_json(folder / "description.json")
        if description.get("format") != EXPORT_FORMAT:
            raise ShortcutMismatch(
                f"{folder}: not a jtc shortcut export (format {description.get('format')!r}, "
                f"expected {EXPORT_FORMAT!r})"
            )
        return cls(description, None if description["method"] == "id" else folder / MAP_NAME)

    def map(self, source: int, target: int) -> ShortcutMap:
        """The map from layer `source` to layer `target` (callable on (n, d) states)."""
        if not 0 <= source < target <= self.num_layers:
            raise ValueError(
                f"no map from layer {source} to {target}: need 0 <= source < target <= "
                f"{self.num_layers}"
            )
        key = (source, target)
        if key not in self._cache:
            self._cache[key] = load_map(self.path, source, target)
        return self._cache[key]

    def affine(self, source: int, target: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The map from `source` to `target` as (weight (d_out, d_in), bias or None), float64:
        pred = h @ weight.T + bias, whatever the method's parts (low-rank, normalised, ...)."""
        return self.map(source, target).affine()

    def weight(self, source: int, target: int) -> np.ndarray:
        """The (d_out, d_in) matrix of a map without intercept (mat, NJTC); see `affine`."""
        weight, bias = self.affine(source, target)
        if bias is not None:
            raise ValueError(
                f"the {self.method} map from layer {source} to {target} has an intercept: "
                f"use affine()"
            )
        return weight

    def apply(self, states, source: int, target: int | None = None):
        """States of layer `source` (..., d) mapped to layer `target` (default: the last): a
        numpy array gives float64 numpy; a torch tensor (e.g. activations captured by a hook)
        gives a tensor of its dtype on its device, through the map's `to_torch` module."""
        target = self.num_layers if target is None else target
        is_torch = type(states).__module__.split(".")[0] == "torch"
        if not is_torch:
            states = np.asarray(states)
        if states.shape[-1] != self.description["hidden_size"]:
            raise ShortcutMismatch(
                f"states of width {states.shape[-1]} given to shortcuts fitted on width "
                f"{self.description['hidden_size']} (model '{self.description['model']}')"
            )
        if source == target or self.method == "id":
            return states
        if not is_torch:
            return self.map(source, target)(states)
        key = (source, target, states.device, states.dtype)
        if key not in self._modules:
            self._modules[key] = self.map(source, target).to_torch(states.dtype, states.device)
        return self._modules[key](states)

    def check_model(self, info: dict[str, Any]) -> None:
        """Refuse a model whose width or layer count differs from the one the maps fit."""
        for key in ("hidden_size", "num_layers"):
            if int(info[key]) != int(self.description[key]):
                raise ShortcutMismatch(
                    f"these {self.method} shortcuts were fitted on model "
                    f"'{self.description['model']}' ({key} {self.description[key]}); the model "
                    f"given has {key} {info[key]}"
                )

    def export(
        self, folder: str | Path, results: str | Path | None = None, force: bool = False
    ) -> Path:
        """Write the maps and a description.json (model, corpus, layers, method, fit statistics,
        versions; a local model folder by its name only) to `folder`, which must be new or
        empty unless `force`; `results` adds the r² of every pair from the run's r² table. The
        identity (id) has no maps to export."""
        import torch
        import transformers

        from jtc import __version__

        folder = Path(folder)
        if self.path is None:
            raise ValueError(
                f"'{self.method}' is the identity: it has no maps to export (each layer's state "
                f"is used as it is)"
            )
        if folder.exists() and not force and (not folder.is_dir() or any(folder.iterdir())):
            raise FileExistsError(
                f"{folder} exists and is not empty: export to a new folder, or replace it "
                f"(--force; force=True)"
            )
        meta = read_metadata(self.path)
        statistics = {k: meta[k] for k in ("n_train", "solvers", "rank") if k in meta}
        if results is not None:
            r2_path = paths.under(
                results,
                paths.metric("r2.parquet"),
                model=self.description["model"],
                corpus=self.description["corpus"],
            )
            if r2_path.exists():
                rows = read_table(r2_path).to_pylist()
                statistics["validation_r2"] = {
                    f"{r['source_layer']}->{r['target_layer']}": r["r2"]
                    for r in rows
                    if r["method"] == self.method
                }
        description = {
            **self.description,
            "model_source": shareable_source(self.description.get("model_source")),
            "format": EXPORT_FORMAT,
            "convention": (
                f"{MAP_NAME}: maps from_{{l}}.to_{{l'}}.* for l < l'; see jtc.shortcuts.maps"
            ),
            "fit_statistics": statistics,
            "versions": {
                "jtc": __version__,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
            },
        }
        with atomic_dir(folder) as tmp:
            shutil.copyfile(self.path, tmp / MAP_NAME)
            (tmp / "description.json").write_text(
                json.dumps(description, indent=2, sort_keys=True) + "\n"
            )
        return folder


class Lens:
    """A model, its decoder head and shortcuts: what each layer predicts on new text."""

    def __init__(self, model, tokenizer, info: dict[str, Any], shortcuts: list[Shortcuts]):
        from jtc.model.adapters import adapter_of
        from jtc.model.head import Head

        for shortcut in shortcuts:
            shortcut.check_model(info)
        self.model, self.tokenizer, self.info = model, tokenizer, info
        self.adapter = adapter_of(info)
        self.head = Head.from_model(model, self.adapter, info.get("name", "model"))
        self.shortcuts = {s.method: s for s in shortcuts}

    @classmethod
    def from_model(
        cls, model, tokenizer, shortcuts: list[Shortcuts | str | Path], name: str = "model"
    ) -> Lens:
        """A Lens over a loaded Hugging Face model (causal or masked LM) and its tokenizer.
        `shortcuts`: Shortcuts, folders written by `export` (or `jtc export`), or "id"; each
        is checked against the model's width and depth."""
        from jtc.model.cache import model_info

        info = model_info(name, model, tokenizer, "in memory")
        loaded = [
            s
            if isinstance(s, Shortcuts)
            else Shortcuts.identity(info)
            if str(s) == "id"
            else Shortcuts.load(s)
            for s in shortcuts
        ]
        return cls(model.eval(), tokenizer, info, loaded)

    @classmethod
    def load(
        cls,
        source: str,
        shortcuts: list[Shortcuts | str | Path],
        trust_remote_code: bool = False,
    ) -> Lens:
        """A Lens over a model loaded the way the workflow loads one (config `models.NAME.source`:
        a local folder or .gguf file, "package:NAME/PATH", or a Hugging Face hub id), with
        `shortcuts` as in `from_model`."""
        from jtc.model.cache import load_from_source

        spec = {"source": source, "trust_remote_code": trust_remote_code}
        model, tokenizer, _, _ = load_from_source(Path(source).name or source, spec)
        return cls.from_model(model, tokenizer, shortcuts, name=Path(source).name or source)

    @classmethod
    def from_results(
        cls,
        results: str | Path,
        model: str,
        corpus: str,
        methods: tuple[str, ...] = ("id", "mat"),
    ) -> Lens:
        from jtc.model.cache import load_cached

        # the shortcuts first: a missing model, corpus or method is named with what exists
        shortcuts = [Shortcuts.from_results(results, model, corpus, m) for m in methods]
        net, tokenizer, info = load_cached(paths.under(results, paths.MODEL, model=model))
        return cls(net, tokenizer, info, shortcuts)

    @property
    def masked(self) -> bool:
        """A masked LM: its maps were fitted on states at masked positions."""
        return self.info.get("task") == "masked"

    def hidden_states(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(token ids (T,), states (L+1, T, d)) of the text, every position; h_L before the
        final norm, as the workflow stores it. A masked LM reads each position with that
        position masked (its maps were fitted so; one row of a batch per position), and its
        special tokens ([CLS], [SEP]) as they are."""
        import torch

        from jtc.model.hooks import StateRecorder

        ids = self.tokenizer(text, add_special_tokens=True, return_tensors="pt")["input_ids"]
        count = ids.shape[1]
        batch, rows = ids, torch.zeros(count, dtype=torch.long)
        if self.masked:
            special = set(self.tokenizer.all_special_ids)
            batch = ids.repeat(count, 1)
            for t in range(count):
                if int(ids[0, t]) not in special:
                    batch[t, t] = self.tokenizer.mask_token_id
            rows = torch.arange(count)
        recorder = StateRecorder(self.adapter.blocks(self.model))
        recorder.index = (rows.to(self.model.device), torch.arange(count, device=self.model.device))
        try:
            with torch.inference_mode():
                self.adapter.backbone(self.model)(input_ids=batch.to(self.model.device))
        finally:
            recorder.remove()
        states = np.stack([s.cpu().numpy() for s in recorder.states])
        return ids[0].numpy(), states

    def predictions(self, text: str, k: int = 5, layers: list[int] | None = None) -> pa.Table:
        """Top-k tokens per method, layer and position: each layer's state mapped to the last
        layer by each method and decoded by the model's own head."""
        from jtc.evaluation.decode import top_tokens

        ids, states = self.hidden_states(text)
        last = len(states) - 1
        inputs = [self.token(t) for t in ids]
        rows: dict[str, list] = {c: [] for c in LENS_COLUMNS}
        for method, shortcut in self.shortcuts.items():
            for layer in range(last + 1) if layers is None else layers:
                mapped = shortcut.apply(states[layer], layer).astype(np.float32)
                top_ids, probs = top_tokens(self.head, mapped, k)
                for position in range(len(ids)):
                    for rank in range(k):
                        values = (
                            method,
                            layer,
                            position,
                            inputs[position],
                            rank + 1,
                            int(top_ids[position, rank]),
                            self.token(top_ids[position, rank]),
                            float(probs[position, rank]),
                        )
                        for column, value in zip(LENS_COLUMNS, values, strict=True):
                            rows[column].append(value)
        return pa.table({c: pa.array(rows[c], t) for c, t in LENS_COLUMNS.items()})

    def trajectories(self, text: str, stat: str = "prob") -> pa.Table:
        """Per method, layer and position: the top-1 token read from that layer and a statistic
        of its distribution D(mapped state) (LENS_STATS): prob, its top-1 probability; entropy;
        kl, KL(D(h_L) ‖ D(mapped)); rank, the rank of the model's own top-1 token (1: agrees)."""
        import torch

        if stat not in LENS_STATS:
            raise ValueError(f"unknown statistic '{stat}': one of {', '.join(LENS_STATS)}")
        ids, states = self.hidden_states(text)
        last = len(states) - 1
        inputs = [self.token(t) for t in ids]
        with torch.inference_mode():
            final = torch.log_softmax(self.head.logits(torch.tensor(states[last])), dim=1)
            rows: dict[str, list] = {c: [] for c in TRAJECTORY_COLUMNS}
            for method, shortcut in self.shortcuts.items():
                for layer in range(last + 1):
                    mapped = shortcut.apply(states[layer], layer).astype(np.float32)
                    logp = torch.log_softmax(self.head.logits(torch.tensor(mapped)), dim=1)
                    top = logp.argmax(1)
                    values = lens_statistic(stat, logp, final)
                    for position in range(len(ids)):
                        rows["method"].append(method)
                        rows["layer"].append(layer)
                        rows["position"].append(position)
                        rows["input_token"].append(inputs[position])
                        rows["token"].append(self.token(top[position]))
                        rows["value"].append(float(values[position]))
        return pa.table({c: pa.array(rows[c], t) for c, t in TRAJECTORY_COLUMNS.items()})

    def figure(
        self,
        text: str,
        png: str | Path,
        pdf: str | Path | None = None,
        stat: str = "prob",
        scale: tuple[float, float] | None = None,
    ) -> pa.Table:
        """The lens view: one layer × token panel per method, stacked, each cell the top-1 token
        read from that layer, coloured by `stat` (LENS_STATS) on a scale fitted to the values
        unless `scale` = (low, high) is given. Returns the table it shows (trajectories)."""
        from jtc.report.figures.lens import lens_heatmap

        table = self.trajectories(text, stat)
        name = self.info.get("name", "model")
        what = "each position read masked" if self.masked else "the next token"
        paths = [png] if pdf is None else [png, pdf]
        title = f"{name}: what each layer predicts ({what})"
        lens_heatmap(table, title, LENS_STATS[stat], scale, self.masked, *paths)
        return table

    def token(self, token_id) -> str:
        """The text of one token id, as the lens shows it."""
        from jtc.report.examples import token_text

        return token_text(self.tokenizer, int(token_id))
