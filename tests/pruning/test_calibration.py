"""Depth pruning on tiny random models: the calibration sums and the span maps fitted from them
against plain numpy least squares on the same tokens, the selection rules, and the evaluation
runs against the model with the blocks really removed."""

import copy
import dataclasses

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from tiny import SENTENCES, make_model

from jtc.model.adapters import get_adapter
from jtc.model.head import Head
from jtc.pruning.calibrate import fit_span
from jtc.pruning.fits import select_spans
from jtc.pruning.runs import SpanRun, span_scores
from jtc.pruning.spans import (
    StatisticsPlan,
    default_lengths,
    exported_span,
    lengths_problem,
    removed_label,
    spans,
    sums_batch,
    sums_batch_bytes,
)
from jtc.pruning.sums import span_statistics
from jtc.settings import ExportSettings
from jtc.shortcuts.maps import ShortcutMap

LAYERS = 6


def token_inputs(tokenizer, sentences=SENTENCES):
    return [np.asarray(tokenizer(s)["input_ids"], dtype=np.int64) for s in sentences]


def every_token(model, adapter, inputs):
    """h_0..h_L and X_1..X_L (feed-forward outputs) at every token, (N, d) float64 each, from
    hooks of the test's own, one sequence at a time (no padding)."""
    blocks = adapter.blocks(model)
    out = lambda o: o[0] if isinstance(o, tuple) else o  # noqa: E731
    states = [[] for _ in range(len(blocks) + 1)]
    ffn = [[] for _ in range(len(blocks))]
    handles = [
        blocks[0].register_forward_pre_hook(
            lambda m, args, kwargs: states[0].append(
                (args[0] if args else kwargs["hidden_states"])[0]
            ),
            with_kwargs=True,
        )
    ]
    for layer, block in enumerate(blocks, 1):
        handles.append(
            block.register_forward_hook(lambda m, a, o, k=layer: states[k].append(out(o)[0]))
        )
        handles.append(
            adapter.part("ffn")
            .modules(block)[1]
            .register_forward_hook(lambda m, a, o, k=layer: ffn[k - 1].append(out(o)[0]))
        )
    with torch.inference_mode():
        for ids in inputs:
            adapter.backbone(model)(input_ids=torch.tensor(ids)[None])
    for handle in handles:
        handle.remove()
    stack = lambda xs: torch.cat(xs).double().numpy()  # noqa: E731
    return [stack(s) for s in states], [stack(x) for x in ffn]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny(request):
    model, tokenizer = make_model(request.param, layers=LAYERS, width=32)
    return model, tokenizer, get_adapter(request.param)


def statistics(
    model, adapter, inputs, lengths=(1, 2), variants=("drop", "mat", "replaceme", "low_rank")
):
    plan = StatisticsPlan.of(LAYERS, lengths, variants)
    return span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)


def test_default_lengths_are_an_eighth_and_a_quarter_of_the_depth():
    assert default_lengths(30) == [4, 8]
    assert default_lengths(32) == [4, 8]
    assert default_lengths(2) == [1]
    assert spans(5, [2], "replaceme") == [(1, 2), (2, 2), (3, 2)]
    assert spans(5, [2], "drop")[0] == (0, 2)
    assert removed_label([5, 6, 7]) == "5-7" and removed_label([3, 9]) == "3,9"
    assert "pruning.lengths" in lengths_problem(6, [6])
    assert lengths_problem(6, [5]) is None


def test_span_maps_equal_numpy_least_squares_on_the_same_tokens(tiny):
    model, tokenizer, adapter = tiny
    inputs = token_inputs(tokenizer)
    grams = statistics(model, adapter, inputs)
    h, x = every_token(model, adapter, inputs)
    assert grams.tokens == len(h[0]) == sum(len(i) for i in inputs)
    # Tolerances: both sides sum in float64 the float32 states of two different forwards (the
    # library's batches of 3, padded, against one sentence at a time here; torch's thread count
    # changes the matmul blocking too), which agree to ~1.5 float32 eps (eps32 = 1.2e-7) of the
    # states' scale, not bit for bit. A sum of squares then moves by ~2 such eps relative (the
    # float64 additions add only ~n eps64 = 3e-13): rtol 1e-6 = 8 eps32 (measured <= 5e-9 with
    # 1 to 16 threads; one token fewer moves these sums by 1.7e-2).
    np.testing.assert_allclose(grams.squares, [(s * s).sum() for s in h], rtol=1e-6)
    for start, length in [(1, 2), (3, 1), (4, 2)]:
        end = start + length
        # replaceme: X T ≈ h_end - r_start, r = h - X
        target = h[end] - h[start] + x[start - 1]
        t_ref = np.linalg.lstsq(x[start - 1], target, rcond=None)[0]
        fit = fit_span(grams, "replaceme", start, length, rank=2)
        assert fit.solver == "cholesky"
        t = fit.tensors["weight"].T
        # least squares moves its solution by up to cond(X) (20 to 40 here) times the relative
        # change of its data (a few eps32): 4 cond(X) eps32 of max|T| (measured <= 0.3 cond(X)
        # eps32 with 1 to 16 threads; one token fewer moves T by 5e-2 of max|T|)
        tol = 4 * np.linalg.cond(x[start - 1]) * np.finfo(np.float32).eps
        assert np.abs(t - t_ref).max() <= tol * np.abs(t_ref).max()
        replaced = h[start] - x[start - 1] + x[start - 1] @ t
        loss = ((replaced - h[end]) ** 2).sum() / (h[end] ** 2).sum()
        assert fit.loss == pytest.approx(loss, rel=1e-6)
        # mat: h_start A ≈ h_end
        a_ref = np.linalg.lstsq(h[start], h[end], rcond=None)[0]
        mat = fit_span(grams, "mat", start, length, rank=2)
        tol = 4 * np.linalg.cond(h[start]) * np.finfo(np.float32).eps  # as T's
        np.testing.assert_allclose(mat.tensors["weight"].T, a_ref, atol=tol * np.abs(a_ref).max())
        mat_loss = ((h[start] @ a_ref - h[end]) ** 2).sum() / (h[end] ** 2).sum()
        assert mat.loss == pytest.approx(mat_loss, rel=1e-6)
        # low_rank: h_start plus a rank-2 map of the difference, never better than mat on the
        # calibration tokens (I + B C is one of mat's maps)
        low = fit_span(grams, "low_rank", start, length, rank=2)
        assert ShortcutMap(low.tensors).rank == 2
        assert mat.loss <= low.loss
        pred = h[start] + ShortcutMap(low.tensors)(h[start])
        assert low.loss == pytest.approx(
            ((pred - h[end]) ** 2).sum() / (h[end] ** 2).sum(), rel=1e-6
        )
        # drop: the squared distance, and UIDL's angle
        drop = fit_span(grams, "drop", start, length, rank=2)
        assert drop.loss == pytest.approx(((h[start] - h[end]) ** 2).sum() / (h[end] ** 2).sum())
        cos = (h[start] * h[end]).sum(1) / np.linalg.norm(h[start], axis=1)
        cos /= np.linalg.norm(h[end], axis=1)
        angle = np.mean(np.arccos(np.clip(cos, -1, 1)) / np.pi)
        # an error e of the cosines (<= ~eps32, averaged over the tokens) moves arccos by
        # e / sin(angle) and 1 - cos (block influence) by e: relative, by up to e / (1 - cos)
        # <= eps32 / 0.008 = 1.5e-5 here: rtol 2e-5 (measured <= 2e-8; one token fewer: 3.7e-3)
        assert grams.angular_distance(start, length) == pytest.approx(angle, rel=2e-5)
    influence = [
        1 - np.mean((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))
        for a, b in zip(h[:-1], h[1:], strict=True)
    ]
    np.testing.assert_allclose(grams.block_influence(), influence, rtol=2e-5)  # as the angle's


def test_long_sequences_take_smaller_batches_and_the_same_sums(tiny, monkeypatch):
    """A batch whose states would pass the budget takes fewer sequences (2,048-token windows:
    28 GB at the default batch on SmolLM2), at least one; the sums do not change."""
    model, tokenizer, adapter = tiny
    inputs = token_inputs(tokenizer)
    longest = max(len(x) for x in inputs)
    one = sums_batch_bytes(longest, LAYERS, 32)
    assert one == longest * 32 * ((LAYERS + 1) * 12 + LAYERS * 4)
    assert sums_batch(32, 2048, 30, 576) == 3 and sums_batch(32, 2048, 28, 1536) == 1
    assert sums_batch(32, 64, 30, 576) == 32  # sentences: the batch as configured
    passes = []
    hook = adapter.backbone(model).register_forward_pre_hook(lambda *_: passes.append(1))
    try:
        wide = statistics(model, adapter, inputs)
        assert len(passes) == -(-len(inputs) // 3)  # batches of 3
        monkeypatch.setattr("jtc.pruning.spans.SUMS_BATCH_BYTES", one)
        assert sums_batch(3, longest, LAYERS, 32) == 1 and sums_batch(3, 10**6, LAYERS, 32) == 1
        passes.clear()
        narrow = statistics(model, adapter, inputs)
        assert len(passes) == len(inputs)  # one sequence a batch
    finally:
        hook.remove()
    assert narrow.tokens == wide.tokens
    np.testing.assert_allclose(narrow.squares, wide.squares, rtol=1e-6)
    for i, gram in wide.state_grams.items():
        np.testing.assert_allclose(
            narrow.state_grams[i], gram, rtol=1e-5, atol=1e-6 * abs(gram).max()
        )


def test_fewer_tokens_than_the_width_take_the_minimum_norm_solution(tiny):
    model, tokenizer, adapter = tiny
    inputs = token_inputs(tokenizer, SENTENCES[:2])  # about 20 tokens, width 32
    grams = statistics(model, adapter, inputs)
    h, x = every_token(model, adapter, inputs)
    fit = fit_span(grams, "replaceme", 2, 2, rank=2)
    assert fit.solver == "pinv"
    target = h[4] - h[2] + x[1]
    t_ref = np.linalg.lstsq(x[1], target, rcond=None)[0]  # minimum norm
    t = fit.tensors["weight"].T
    tol = 4 * np.linalg.cond(x[1]) * np.finfo(np.float32).eps  # as in the test above
    assert np.abs(t - t_ref).max() <= tol * np.abs(t_ref).max()


def test_selection_uses_calibration_statistics_only(tiny):
    model, tokenizer, adapter = tiny
    grams = statistics(model, adapter, token_inputs(tokenizer))
    fits = [fit_span(grams, v, i, n, 2) for v in ("drop", "mat") for i, n in spans(LAYERS, [2], v)]
    chosen = {(s.selection, s.variant): s for s in select_spans(grams, fits, [2], ["drop", "mat"])}
    angles = [grams.angular_distance(i, 2) for i in range(LAYERS - 1)]
    assert chosen["angular_distance", "drop"].start == int(np.argmin(angles))
    influence = grams.block_influence()
    sums = [influence[i : i + 2].sum() for i in range(LAYERS - 1)]
    assert chosen["block_influence", "mat"].start == int(np.argmin(sums))
    mat_losses = [f.loss for f in fits if f.variant == "mat"]
    assert chosen["measured", "mat"].start == int(np.argmin(mat_losses))
    lowest = chosen["lowest_block_influence", "drop"]
    assert lowest.removed == tuple(sorted(np.argsort(influence, kind="stable")[:2] + 1))
    assert ("lowest_block_influence", "mat") not in chosen  # only dropping is defined


def pruned_copy(model, adapter, removed, start=None, transform=None):
    """A deep copy of the model with the blocks `removed` (1-based) deleted and, with a
    transform, block `start`'s feed-forward output multiplied by it (torch convention)."""
    pruned = copy.deepcopy(model)
    blocks = adapter.blocks(pruned)
    if transform is not None:
        ffn = adapter.part("ffn").modules(blocks[start - 1])[1]
        weight = torch.tensor(transform, dtype=torch.float32)
        ffn.register_forward_hook(lambda m, a, o: o @ weight.T)
    adapter.swap_blocks(pruned, [b for n, b in enumerate(blocks, 1) if n not in removed])
    return pruned


def sentence_losses(model, inputs):
    """Per sentence: summed cross-entropy to the next token, and the top-1 tokens."""
    losses, tops = [], []
    with torch.inference_mode():
        for ids in inputs:
            logits = model(input_ids=torch.tensor(ids)[None]).logits[0, :-1].double()
            gold = torch.tensor(ids[1:])
            losses.append(float(torch.nn.functional.cross_entropy(logits, gold, reduction="sum")))
            tops.append(logits.argmax(1).numpy())
    return np.array(losses), tops


def score_runs(model, adapter, inputs, runs, maps):
    """span_scores of `runs` on `inputs` (sentence ids 0..), `maps` {(variant, start, length):
    the map's tensors}."""

    def span_map(run):
        tensors = dict(maps.get((run.variant, run.start, run.length)) or {})
        rotation = tensors.pop("rotation", None)  # rotation_replaceme's second part
        return (ShortcutMap(tensors) if tensors else None), rotation

    head = Head.from_model(model, adapter)
    ids = np.arange(len(inputs))
    return span_scores(model, adapter, head, inputs, ids, runs, span_map, batch_size=3, pad_id=0)


def test_span_runs_equal_the_model_with_the_blocks_removed(tiny):
    model, tokenizer, adapter = tiny
    inputs = token_inputs(tokenizer)
    grams = statistics(model, adapter, inputs)
    replaceme = fit_span(grams, "replaceme", 2, 2, rank=2)
    runs = [
        SpanRun.span("drop", 1, 2),
        SpanRun.span("replaceme", 2, 2),
        SpanRun.span("drop", 4, 2),  # ends at the last block
        SpanRun("drop", -1, 2, (2, 5)),  # not consecutive
    ]
    table = score_runs(model, adapter, inputs, runs, {("replaceme", 2, 2): replaceme.tensors})
    full, full_tops = sentence_losses(model, inputs)
    for run in runs:
        mine = pc.and_(
            pc.equal(table["variant"], run.variant),
            pc.equal(table["removed"], removed_label(run.removed)),
        )
        rows = table.filter(mine).to_pydict()
        transform = replaceme.tensors["weight"] if run.variant == "replaceme" else None
        pruned = pruned_copy(model, adapter, set(run.removed), run.start, transform)
        losses, tops = sentence_losses(pruned, inputs)
        np.testing.assert_allclose(rows["cross_entropy"], losses, rtol=1e-4)
        np.testing.assert_allclose(rows["cross_entropy_full"], full, rtol=1e-4)
        assert rows["tokens"] == [len(i) - 1 for i in inputs]
        agreement = [int((a == b).sum()) for a, b in zip(tops, full_tops, strict=True)]
        assert rows["agreement"] == agreement
        assert all(k >= 0 for k in rows["kl"]) and sum(rows["overflowed"]) == 0


def test_span_runs_keep_each_blocks_own_attention_type():
    """Qwen2 with sliding-window attention in its last block: a span run reads each kept
    block's layer type (config.layer_types by position) as the pruned checkpoint does."""
    from pruneable import TOKENIZER, make

    from jtc.pruning.checkpoint import prune_blocks

    model, adapter = make("qwen2")
    inputs = token_inputs(TOKENIZER)
    layers = len(adapter.blocks(model))
    plan = StatisticsPlan.of(layers, [2], ["drop", "replaceme"])
    grams = span_statistics(model, adapter, inputs, plan, batch_size=3, pad_id=0)
    weight = fit_span(grams, "replaceme", 1, 2, rank=2).tensors["weight"]
    runs = [SpanRun.span("drop", 0, 2), SpanRun.span("replaceme", 1, 2)]
    maps = {("replaceme", 1, 2): {"weight": weight}}
    table = score_runs(model, adapter, inputs, runs, maps).to_pydict()
    for k, run in enumerate(runs):
        pruned = copy.deepcopy(model)
        transform = weight if run.variant == "replaceme" else None
        prune_blocks(pruned, adapter, run.start, run.length, transform)
        losses, _ = sentence_losses(pruned, inputs)
        got = table["cross_entropy"][k * len(inputs) : (k + 1) * len(inputs)]
        np.testing.assert_allclose(got, losses, rtol=1e-4)


def test_models_that_cannot_be_pruned_are_refused_by_name():
    from jtc.model.adapters import Adapter
    from jtc.pruning.spans import pruning_problem

    llama = get_adapter("llama")
    parallel = Adapter(
        "gpt_neox", "causal", "gpt_neox", "layers", "final_layer_norm", (), "embed_out"
    )
    masked = pruning_problem("bert", "masked", None, 2, [1], ["drop"])
    assert "config key 'pruning.models': model 'bert' is a masked LM" in masked
    no_parts = pruning_problem("neox", "causal", parallel, 6, [2], ["drop", "replaceme"])
    assert "config key 'pruning.variants': replaceme" in no_parts and "gpt_neox" in no_parts
    assert pruning_problem("neox", "causal", parallel, 6, [2], ["drop", "mat"]) is None
    too_long = pruning_problem("llama", "causal", llama, 6, [2, 6], ["drop"])
    assert "'pruning.lengths': 6 blocks cannot be removed from a model of 6 blocks" in too_long
    assert pruning_problem("llama", "causal", llama, None, [40], ["drop"]) is None  # depth unknown


def test_the_exported_span_is_the_one_the_rule_chose_at_the_length():
    """export_pruned's span: the configured length, or the one closest to a quarter of the
    depth; a variant the selection table lacks is refused by its config key."""
    rows = [
        {"length": n, "variant": v, "selection": "measured", "start": start}
        for n, v, start in ((2, "replaceme", 3), (4, "replaceme", 1), (4, "drop", 5))
    ]
    assert ExportSettings.defaults().export_selection == "measured"  # the default
    settings = ExportSettings.defaults(export_variant="replaceme", export_selection="measured")
    assert exported_span(rows, 16, settings, "m") == (1, 4)
    assert exported_span(rows, 12, settings, "m") == (3, 2)  # 2 and 4 as close: the shorter
    assert exported_span(rows, 16, dataclasses.replace(settings, export_length=2), "m") == (3, 2)
    drop = dataclasses.replace(settings, export_variant="drop", export_length=2)
    with pytest.raises(ValueError, match="'pruning.export_variant': no drop span of 2 blocks"):
        exported_span(rows, 16, drop, "m")
