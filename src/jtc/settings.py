"""Settings objects: a block of the config (or the part of it one stage reads) as a frozen
dataclass, one field per key (standard library and PyYAML only: the workflow reads the field
names while it plans).

A rule passes the block as one param, `settings=EarlyExitSettings.param(config)`; the stage
turns it into the object with `EarlyExitSettings.of(params.settings)` and hands that to the
library. The training block has one sub-block per method (training.<method>), which `param`,
`defaults` and `from_config` name: `LowRankSettings.param(config, "njtc")`; an object of a
fixed sub-block names it in SUB_BLOCK (pruning.benchmarks: BenchmarkSettings). A new key is
therefore added in two places: the config schema (its type, bounds, default and description,
src/jtc/pipeline/config.schema.yaml) and the field here, where the library reads it. Defaults are
the schema's, never retyped: the workflow's checked config has them filled in, and `defaults()`
reads them for use outside the workflow (the API, tests, benchmarks). A stage reads only the
keys its object has, so changing another key of the same block reruns other stages, not this
one: a rule's params hold the objects of exactly what its job reads (a small object of its own
where a stage reads a few keys of a block, as the measures do), and config/README.md says what
each key reruns from them (jtc.pipeline.rule_reads).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml

SCHEMA = Path(__file__).parent / "pipeline" / "config.schema.yaml"
# early_exit.lambdas empty: 125 values from −0.12 (a threshold below 0: every token exits at
# min_layer) to 1.12 (above 1: none does) in steps of 0.01
DEFAULT_LAMBDAS = tuple(round(-0.12 + 0.01 * i, 2) for i in range(125))


def resolved(node: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema node with its local `$ref` followed: the referenced node, updated by the keys
    beside the `$ref` (a block's own default beside a shared type)."""
    node = dict(node)
    while "$ref" in node:
        target: Any = schema
        for part in node.pop("$ref").removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **node}
    return node


@functools.cache
def _schema_defaults(block: str, method: str | None) -> dict[str, Any]:
    schema = yaml.safe_load(SCHEMA.read_text())
    node = resolved(schema["properties"][block], schema)
    if method is not None:
        node = resolved(node["properties"][method], schema)
    specs = {key: resolved(spec, schema) for key, spec in node["properties"].items()}
    return {key: spec["default"] for key, spec in specs.items() if "default" in spec}


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class Settings:
    """What every settings object shares; subclasses are frozen dataclasses naming their config
    block in BLOCK."""

    BLOCK: ClassVar[str]
    # a sub-block of BLOCK that the object always reads (pruning.benchmarks), else None
    SUB_BLOCK: ClassVar[str | None] = None

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def param(cls, config: Mapping[str, Any], method: str | None = None) -> dict[str, Any]:
        """The rule's one param: the keys of the checked config's block (its sub-block
        `method`, for training) that this object reads."""
        method = method if method is not None else cls.SUB_BLOCK
        block = config[cls.BLOCK] if method is None else config[cls.BLOCK][method]
        return {key: block[key] for key in cls.keys()}

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """The object of a param (every key present, no other)."""
        keys = set(cls.keys())
        unknown, missing = sorted(set(values) - keys), sorted(keys - set(values))
        problems = []
        if unknown:
            problems.append(f"unknown keys {unknown}")
        if missing:
            problems.append(f"missing keys {missing}")
        if problems:
            raise ValueError(f"{cls.__name__} (config {cls.BLOCK}): {'; '.join(problems)}")
        return cls(**{key: _frozen(values[key]) for key in cls.keys()})

    @classmethod
    def from_config(cls, config: Mapping[str, Any], method: str | None = None) -> Self:
        """The object of a checked config (outside a job: planning, resource estimates)."""
        return cls.of(cls.param(config, method))

    @classmethod
    def defaults(cls, method: str | None = None, /, **changes: Any) -> Self:
        """The schema's defaults (of training.<method>, for training), with `changes`."""
        defaults = _schema_defaults(cls.BLOCK, method if method is not None else cls.SUB_BLOCK)
        return cls.of({**{key: defaults[key] for key in cls.keys()}, **changes})


@dataclasses.dataclass(frozen=True)
class EarlyExitSettings(Settings):
    """Early exit (config early_exit; docs/method.md, "Early exit"): a token exits at the first
    checked layer l >= min_layer whose prediction's confidence (top-1 minus top-2 probability)
    exceeds lambda_weight·λ + decay_weight·exp(−tau·t/N)."""

    BLOCK: ClassVar[str] = "early_exit"

    lambdas: tuple[float, ...]
    """The λ values swept; empty: DEFAULT_LAMBDAS."""
    tau: float
    """Decay rate τ of the position term."""
    lambda_weight: float
    """Weight of λ in the threshold."""
    decay_weight: float
    """Weight of the position term in the threshold."""
    min_layer: int
    """The first layer a token may exit at."""
    check_every: tuple[int, ...]
    """Check intervals compared: with k, the confidence is checked at every k-th layer."""
    shortlist_rank: int
    """Rank of the shortlist check's factorisation of the head; 0: no shortlist check."""
    shortlist_candidates: int
    """Candidates whose exact logits the shortlist check computes."""
    folds: int
    """Folds of the validation positions for the held-out thresholds."""
    targets: tuple[float, ...]
    """Target accuracies (Precision@1 against the full model) of the layers-saved table."""

    def lambda_grid(self) -> tuple[float, ...]:
        """The λ values swept: `lambdas`, or DEFAULT_LAMBDAS when it is empty."""
        return self.lambdas or DEFAULT_LAMBDAS


@dataclasses.dataclass(frozen=True)
class IntervalSettings(Settings):
    """The prediction summary (config prediction): Precision@k and the bootstrap intervals of
    every mean (the prediction and sub-module tables)."""

    BLOCK: ClassVar[str] = "prediction"

    top_k: tuple[int, ...]
    """k values of Precision@k."""
    bootstrap: int
    """Bootstrap resamples of every interval."""
    confidence_level: float
    """Coverage of the intervals."""


@dataclasses.dataclass(frozen=True)
class ExampleSettings(Settings):
    """The worked examples (config prediction): a few validation sentences with the model's
    top-5 and each method's top-5 from early layers."""

    BLOCK: ClassVar[str] = "prediction"

    examples: int
    """Validation sentences shown."""
    example_layers: tuple[int, ...]
    """Layers shown; empty: about 1/6, 1/3, 1/2 and 2/3 of the depth."""


@dataclasses.dataclass(frozen=True)
class CosineSettings(Settings):
    """replaceme_cosine's fit (config pruning.cosine, jtc.pruning.cosine): Adam on the mean
    cosine distance 1 - cos(X T + r_i, h_{i+n}) over the calibration tokens, started from
    replaceme's least-squares T, in shuffled minibatches of calibration tokens."""

    BLOCK: ClassVar[str] = "pruning"
    SUB_BLOCK: ClassVar[str | None] = "cosine"

    epochs: int
    """Passes over the calibration tokens."""
    learning_rate: float
    """Adam's learning rate."""
    batch_tokens: int
    """Calibration tokens per Adam step."""


@dataclasses.dataclass(frozen=True)
class CalibrationText(Settings):
    """The text depth pruning calibrates on (config pruning.calibration, jtc.pruning.windows):
    windows of running text, or the calibration sentences on their own."""

    BLOCK: ClassVar[str] = "pruning"
    SUB_BLOCK: ClassVar[str | None] = "calibration"

    text: str
    """"windows" (running text cut into windows) or "sentences" (calibration_sentences)."""
    windows: int
    """Windows of running text (text windows)."""
    window_tokens: int
    """Tokens per window (text windows)."""

    MORE_TEXT: ClassVar[str] = (
        "raise pruning.calibration.windows or window_tokens (windows of running text), or "
        "pruning.calibration_sentences with text: sentences"
    )
    """How to calibrate on more tokens, for the messages that ask for it."""

    @property
    def tokens(self) -> int:
        """The windows' tokens, windows x window_tokens."""
        return self.windows * self.window_tokens


def _calibration_text(value: Any) -> Any:
    """A mapping as a CalibrationText (keys it lacks take the schema's defaults)."""
    return CalibrationText.defaults(**value) if isinstance(value, Mapping) else value


@dataclasses.dataclass(frozen=True)
class CalibrationSettings(Settings):
    """Depth pruning's calibration (config pruning): the span maps, fitted on every token of the
    calibration sentences, and the statistics that choose a span."""

    BLOCK: ClassVar[str] = "pruning"

    lengths: tuple[int | str, ...]
    """Blocks removed n; empty: about 1/8 and 1/4 of the depth."""
    variants: tuple[str, ...]
    """What stands in for the removed blocks (jtc.pruning.variants.VARIANTS)."""
    rank: int | None
    """The low-rank stand-in's rank (low_rank: h_i + h_i B C); None: floor(d/100), NJTC's."""
    calibration: CalibrationText
    """The calibration text (config pruning.calibration); a mapping becomes a CalibrationText."""
    calibration_sentences: int
    """Training sentences (the first of the split) whose every token is used (text sentences)."""
    ridge: float
    """Relative ridge α of the closed-form fits (mat, replaceme, low_rank): they solve
    (G + α·(tr(G)/d)·I) W = C; 0: plain least squares."""
    skip_first_token: bool
    """Leave each calibration sentence's first token out of the sums (maps and selection)."""
    cosine: CosineSettings
    """replaceme_cosine's Adam fit (config pruning.cosine); a mapping becomes a CosineSettings
    (keys it lacks take the schema's defaults, as the config check fills them)."""

    def __post_init__(self) -> None:
        if isinstance(self.cosine, Mapping):
            object.__setattr__(self, "cosine", CosineSettings.defaults(**self.cosine))
        object.__setattr__(self, "calibration", _calibration_text(self.calibration))


@dataclasses.dataclass(frozen=True)
class SpanRunSettings(Settings):
    """Depth pruning's evaluation runs (config pruning): every span of every length and
    variant on the evaluation sentences, and the spans the selection rules chose on the
    selected sentences."""

    BLOCK: ClassVar[str] = "pruning"

    lengths: tuple[int | str, ...]
    """Blocks removed n; empty: about 1/8 and 1/4 of the depth."""
    variants: tuple[str, ...]
    """What stands in for the removed blocks."""
    evaluation_sentences: int
    """Validation sentences (the first of the split) whose every token is scored."""
    selected_sentences: int
    """Validation sentences (the first of the split) on which the chosen spans are scored."""


@dataclasses.dataclass(frozen=True)
class ContextSettings(Settings):
    """Perplexity at a real context (config pruning.context, jtc.measures.context): windows of
    held-out documents."""

    BLOCK: ClassVar[str] = "pruning"
    SUB_BLOCK: ClassVar[str | None] = "context"

    lengths: tuple[int, ...]
    """Tokens per window, each size measured on its own windows."""
    windows: int
    """Windows per size, at most (fewer where the held-out documents are shorter)."""


@dataclasses.dataclass(frozen=True)
class GenerationSettings(Settings):
    """Generation fidelity (config pruning.generation, jtc.measures.fidelity): greedy
    continuations of held-out prompts."""

    BLOCK: ClassVar[str] = "pruning"
    SUB_BLOCK: ClassVar[str | None] = "generation"

    prompts: int
    """Validation sentences (after those the span runs score) continued."""
    new_tokens: int
    """Tokens each prompt is continued by."""


@dataclasses.dataclass(frozen=True)
class ExportSettings(Settings):
    """The pruned model the workflow writes (config pruning, `snakemake pruned`)."""

    BLOCK: ClassVar[str] = "pruning"

    export_length: int | None
    """Blocks removed; None: the configured length closest to a quarter of the depth."""
    export_selection: str
    """The selection rule that chooses the span (on calibration sentences; the schema's
    default: angular_distance)."""
    export_variant: str
    """The exported stand-in, one of pruning.variants that folds into a checkpoint
    (jtc.pruning.variants.EXPORTED)."""


@dataclasses.dataclass(frozen=True)
class MeasuredSettings(Settings):
    """The pruned models that the benchmarks and the literature's measures measure (config
    pruning, jtc.measures.subjects): the full model and, for every length and variant, the span
    export_selection chose, each pruned in memory (run_benchmarks reads this alone)."""

    BLOCK: ClassVar[str] = "pruning"

    variants: tuple[str, ...]
    """The stand-ins measured, in this order (pruning.variants)."""
    export_selection: str
    """The selection rule whose chosen spans are measured."""
    also_measure: tuple[str, ...]
    """Stand-ins measured at the blocks another rule chose, "variant@selection" (drop at
    ShortGPT's blocks: "drop@lowest_block_influence"), after those of export_selection."""


@dataclasses.dataclass(frozen=True)
class ContextMeasuredSettings(MeasuredSettings):
    """What context_perplexity reads of the pruning block beside pruning.context: the models
    measured, and the calibration sentences, whose documents the windows leave out."""

    BLOCK: ClassVar[str] = "pruning"

    calibration: CalibrationText
    """The calibration text (config pruning.calibration), whose documents the windows leave out."""
    calibration_sentences: int
    """Training sentences (the first of the split) the maps were fitted on (text sentences)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "calibration", _calibration_text(self.calibration))


@dataclasses.dataclass(frozen=True)
class GenerationMeasuredSettings(MeasuredSettings):
    """What generation_fidelity reads of the pruning block beside pruning.generation: the
    models measured, and the validation sentences the span runs score, which the prompts
    follow."""

    BLOCK: ClassVar[str] = "pruning"

    evaluation_sentences: int
    """Validation sentences of the every-start sweep."""
    selected_sentences: int
    """Validation sentences of the chosen spans' runs."""

    def prompts_after(self) -> int:
        """The validation sentences before the first prompt: those either span run reads."""
        return max(self.evaluation_sentences, self.selected_sentences)


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings(Settings):
    """Accuracy on standard tasks through lm-evaluation-harness (config pruning.benchmarks, a
    sub-block; jtc.measures.benchmarks)."""

    BLOCK: ClassVar[str] = "pruning"
    SUB_BLOCK: ClassVar[str | None] = "benchmarks"

    tasks: tuple[str, ...]
    """lm-eval tasks (jtc.measures.tasks.TASKS)."""
    shots: dict[str, int]
    """Few-shot examples before each document, per task (absent: 0)."""
    limit: int
    """Documents per task, the first of the split scored (jtc.measures.tasks.TaskSpec.split)."""


@dataclasses.dataclass(frozen=True)
class RankSettings(Settings):
    """A low-rank method's rank and layer pairs (config training.<method>; alone for rrr, which
    is solved in closed form: unset, they are njtc's)."""

    BLOCK: ClassVar[str] = "training"

    rank: int | None
    """Rank r of the maps; None: floor(d/100), at least 1 (jtc.shortcuts.methods.rank_of)."""
    targets: str
    """Pairs fitted: all, last or auto (jtc.shortcuts.methods.fitted_targets)."""


@dataclasses.dataclass(frozen=True)
class TrainSettings(Settings):
    """How a map is trained by gradient descent (config training.<method>; alone for the tuned
    lens; jtc.shortcuts.train.train_module)."""

    BLOCK: ClassVar[str] = "training"

    optimizer: str
    """adam, or sgd (Nesterov momentum 0.9)."""
    learning_rate: float
    max_epochs: int
    batch_size: int
    holdout_fraction: float
    """Share of the rows held out for early stopping."""
    patience: int
    """Epochs without a better held-out loss before training stops."""
    weight_decay: float
    schedule: str
    """The learning rate schedule: cosine or constant."""
    warm_start: bool
    """Start from the closed-form optimum (jtc.shortcuts.train), else from random maps."""
    positions: int | str
    """Stored training rows per sentence trained on: k or "all" (jtc.data.subsample)."""


@dataclasses.dataclass(frozen=True)
class LowRankSettings(TrainSettings, RankSettings):
    """NJTC, N-NJTC and the one-map methods (config training.<method>): a rank-r map A·B
    trained by gradient descent. Its fields are RankSettings' then TrainSettings' (in that
    order, as the map files' metadata lists them)."""

    BLOCK: ClassVar[str] = "training"
