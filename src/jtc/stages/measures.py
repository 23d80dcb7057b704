"""Stages of workflow/rules/measures.smk, pruned models measured as the pruning literature
does: perplexity of held-out documents at a real context, the fidelity of greedy generation,
and their tables; each for the full model and each length and variant at the span the export
rule (pruning.export_selection) chose (jtc.measures.subjects)."""

from __future__ import annotations


def context_perplexity(
    model_dir: str,
    sentences: str,
    maps: str,
    selection: str,
    out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    measured: dict,
    held_out: int | None,
    batch_size: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """Every measured model's cross entropy and top-1 agreement with the full model on the
    same windows of held-out documents, one row per window (jtc.measures.context); `settings`
    is pruning.context, `measured` the rest of what it reads of pruning, `held_out` the
    validation sentences whose documents the calibration windows leave out."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.measures.context import context_perplexity as measure
    from jtc.model.cache import load_model
    from jtc.settings import ContextMeasuredSettings, ContextSettings

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    context, subjects = ContextSettings.of(settings), ContextMeasuredSettings.of(measured)
    ready()
    windows = measure(
        net,
        tokenizer,
        info,
        read_table(sentences),
        read_table(selection),
        maps,
        contexts=context.lengths,
        windows=context.windows,
        rule=subjects.export_selection,
        variants=subjects.variants,
        also=subjects.also_measure,
        calibration=subjects.calibration,
        calibration_sentences=subjects.calibration_sentences,
        held_out=held_out,
        corpus=corpus,
        model_name=model,
        batch_size=batch_size,
    )
    write_table(windows, out)


def generation_fidelity(
    model_dir: str,
    sentences: str,
    maps: str,
    selection: str,
    out: str,
    *,
    corpus: str,
    settings: dict,
    measured: dict,
    batch_size: int,
    max_tokens: int,
    threads: int,
    device_map: str | None = None,
) -> None:
    """Every measured model's greedy continuation of held-out prompts (validation sentences
    after those the span runs score) against the full model's, one row per prompt
    (jtc.measures.fidelity); `settings` is pruning.generation, `measured` the rest of what it
    reads of pruning."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.measures.fidelity import generation_fidelity as measure
    from jtc.model.cache import load_model
    from jtc.settings import GenerationMeasuredSettings, GenerationSettings

    net, tokenizer, info = load_model(model_dir, threads, device_map)
    generation, subjects = GenerationSettings.of(settings), GenerationMeasuredSettings.of(measured)
    ready()
    prompts = measure(
        net,
        tokenizer,
        info,
        read_table(sentences),
        read_table(selection),
        maps,
        prompts=generation.prompts,
        new_tokens=generation.new_tokens,
        skip=subjects.prompts_after(),
        rule=subjects.export_selection,
        variants=subjects.variants,
        also=subjects.also_measure,
        corpus=corpus,
        max_tokens=max_tokens,
        batch_size=batch_size,
    )
    write_table(prompts, out)


def measure_tables(
    windows: str,
    prompts: str,
    context_out: str,
    generation_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """The context table (per context size and measured model, intervals over windows) and
    the generation table (per measured model, intervals over prompts)."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.measures.tables import context_table, generation_table
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    intervals = IntervalSettings.of(settings)
    names = {"model": model, "corpus": corpus}
    write_table_with_page(context_table(read_table(windows), intervals, seed, **names), context_out)
    write_table_with_page(
        generation_table(read_table(prompts), intervals, seed, **names), generation_out
    )
