"""The registry of depth-pruning variants (jtc.pruning.variants) holds the other lists to it:
the config schema's enums (filled from it), the CLI's choices, the docs' list; every record's
fit runs, and the stand-in its record describes reproduces the calibration loss its fit
reports, token by token; an inconsistent record is refused when the registry is built."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from configs import BASE
from tiny import SENTENCES, make_model

from jtc.cli import _parser
from jtc.model.adapters import get_adapter
from jtc.pipeline.config import ConfigError, load_schema, validate_config
from jtc.pipeline.tracking import script_closure
from jtc.pruning.calibrate import FIT_MODULES, fit_function, fit_span
from jtc.pruning.fits import SpanFit
from jtc.pruning.pruned import stand_in_module, stand_in_state
from jtc.pruning.spans import SELECTIONS, StatisticsPlan, spans
from jtc.pruning.sums import every_state, span_statistics
from jtc.pruning.variants import (
    EXPORTED,
    RETIRED,
    ROTATION_PART,
    VARIANTS,
    Variant,
    registry,
    variant_of,
)
from jtc.settings import SCHEMA, CalibrationSettings, CalibrationText, CosineSettings
from jtc.shortcuts.maps import ShortcutMap

ROOT = Path(__file__).resolve().parents[2]
LAYERS, WIDTH, LENGTHS = 5, 16, [1, 2]


def test_the_config_schema_takes_its_lists_from_the_registry():
    """The schema file names the registry (no list written twice); the loaded schema, which the
    config check and config/README.md read, has its names, and the check takes each of them and
    refuses any other, naming the choices."""
    raw = yaml.safe_load(SCHEMA.read_text())["properties"]["pruning"]["properties"]
    assert "enum" not in raw["variants"]["items"] and "enum" not in raw["export_variant"]
    schema = load_schema()["properties"]["pruning"]["properties"]
    assert schema["variants"]["items"]["enum"] == list(VARIANTS)
    assert schema["export_variant"]["enum"] == list(EXPORTED)
    assert set(schema["variants"]["default"]) <= set(VARIANTS)
    assert schema["export_variant"]["default"] in EXPORTED
    for name in VARIANTS:
        exported = name if name in EXPORTED else "drop"
        pruning = {"variants": list({name: 0, "drop": 0}), "export_variant": exported}
        assert validate_config({**BASE, "pruning": pruning})["pruning"]["variants"][0] == name
    with pytest.raises(ConfigError, match="'shortcut' is not one of.*'rotation_replaceme'"):
        validate_config({**BASE, "pruning": {"variants": ["shortcut"]}})
    with pytest.raises(ConfigError, match="'mat' is not one of.*'rotation'"):
        validate_config({**BASE, "pruning": {"variants": ["mat"], "export_variant": "mat"}})


def test_the_cli_offers_the_exported_variants():
    commands = next(a for a in _parser()._actions if a.dest == "command")
    prune = commands.choices["prune"]
    choices = next(a for a in prune._actions if a.dest == "variant").choices
    assert list(choices) == list(EXPORTED)
    assert [n for n, v in VARIANTS.items() if v.exported] == list(EXPORTED)


def test_the_method_docs_list_every_variant():
    """docs/method.md's "Depth pruning" section has one bullet per variant (and per selection
    rule), and docs/extending.md names the registry."""
    text = (ROOT / "docs" / "method.md").read_text()
    section = text.split("## Depth pruning", 1)[1].split("\n## ", 1)[0]
    bullets = set(re.findall(r"^- `(\w+)`", section, flags=re.M)) - set(SELECTIONS)
    assert bullets == set(VARIANTS)
    assert "jtc.pruning.variants" in (ROOT / "docs" / "extending.md").read_text()


def test_every_fit_is_the_calibrations_tracked_code():
    """calibrate_pruning's code hash (jtc.pipeline.tracking, which reads import statements) covers
    the module of every variant's fit, so that editing a fit reruns the calibration."""
    tracked = script_closure(ROOT / "src", ROOT / "workflow" / "scripts" / "calibrate_pruning.py")
    for record in VARIANTS.values():
        module = record.fit.split(":")[0]
        assert module in FIT_MODULES and module in tracked, record.name
        assert callable(fit_function(record.name))


def test_retired_names_are_refused_with_what_replaced_them():
    assert not set(RETIRED) & set(VARIANTS)
    with pytest.raises(ValueError, match="list low_rank instead"):
        variant_of("rrr")
    with pytest.raises(ValueError, match="unknown pruning variant 'shortcut'; known: drop, mat"):
        variant_of("shortcut")


def test_an_inconsistent_record_is_refused():
    mat = VARIANTS["mat"]
    cases = {
        "stand_in 'wide' is not one of": dataclasses.replace(mat, stand_in="wide"),
        "an exported map must fold every part": dataclasses.replace(mat, folds={}),
        "says why": dataclasses.replace(mat, not_exported=""),
        "only a map of X_i": dataclasses.replace(mat, folds={"weight": "mlp"}),
        "fold site 'head' is not one of": dataclasses.replace(mat, folds={"weight": "head"}),
        "its sums must include ffn": dataclasses.replace(mat, stand_in="ffn", sums=frozenset()),
    }
    for words, record in cases.items():
        with pytest.raises(ValueError, match=f"pruning variant 'mat': .*{re.escape(words)}"):
            registry([record])
    assert registry(VARIANTS.values()) == VARIANTS


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def calibrated(request):
    """A tiny random model's calibration sums of every variant, and every token's h_0..h_L and
    X_1..X_L (float32), on the tiny sentences (more tokens than the width)."""
    model, tokenizer = make_model(request.param, layers=LAYERS, width=WIDTH)
    adapter = get_adapter(request.param)
    inputs = [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in SENTENCES]
    plan = StatisticsPlan.of(LAYERS, LENGTHS, list(VARIANTS))
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    states, ffn = [], []
    with torch.no_grad(), every_state(model, adapter, ffn=True) as kept:
        for ids in inputs:
            adapter.backbone(model)(input_ids=torch.from_numpy(ids)[None], use_cache=False)
            states.append([h[0] for h in kept["states"]])
            ffn.append([x[0] for x in kept["ffn"]])
    rows = [torch.cat([s[layer] for s in states]) for layer in range(LAYERS + 1)]
    ffn_rows = [torch.cat([f[layer] for f in ffn]) for layer in range(LAYERS)]
    assert grams.tokens == len(rows[0]) > WIDTH
    return model, adapter, inputs, grams, rows, ffn_rows


def fits_of(record: Variant, calibrated) -> list[SpanFit]:
    """Every span's fit of a variant, through its record's fit function."""
    model, adapter, inputs, grams, _, _ = calibrated
    todo = spans(LAYERS, LENGTHS, record.name)
    if record.fitted_on == "sums":
        return [fit_span(grams, record.name, start, n, rank=2, ridge=0.0) for start, n in todo]
    settings = CalibrationSettings(
        lengths=tuple(LENGTHS),
        variants=(record.name,),
        rank=None,
        calibration=CalibrationText.defaults(text="sentences"),
        calibration_sentences=len(inputs),
        ridge=0.0,
        skip_first_token=False,
        cosine=CosineSettings(epochs=2, learning_rate=1e-2, batch_tokens=16),
    )
    return fit_function(record.name)(model, adapter, inputs, grams, todo, settings, 3, 0)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_stand_in_reproduces_its_fits_calibration_loss(name, calibrated):
    """The state the record's stand-in computes from h_i (and X_i) with the fitted map, on every
    calibration token, has the relative squared error the fit reports: the record says how the
    map is used as the fit meant it. The map has the parts the record says."""
    record = VARIANTS[name]
    _, _, _, _, rows, ffn_rows = calibrated
    fits = fits_of(record, calibrated)
    assert [(f.variant, f.start, f.length) for f in fits] == [
        (name, i, n) for i, n in spans(LAYERS, LENGTHS, name)
    ]
    assert min(f.start for f in fits) == record.first_start
    for fit in fits:
        parts = dict(fit.tensors)
        rotation = parts.pop(ROTATION_PART, None)
        assert (rotation is not None) == record.rotated
        assert bool(parts) == record.has_map
        linear = stand_in_module(ShortcutMap(parts) if parts else None, rotation)
        i, j = fit.start, fit.start + fit.length
        x = ffn_rows[i - 1] if record.reads_ffn else None
        with torch.no_grad():
            got = stand_in_state(name, linear, rows[i], x)
        error = float(((got - rows[j]) ** 2).sum() / (rows[j] ** 2).sum())
        assert error == pytest.approx(fit.loss, rel=1e-3, abs=1e-6), (name, i, fit.length)
