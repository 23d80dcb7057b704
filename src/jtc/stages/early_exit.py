"""Stages of workflow/rules/early_exit.smk: confidence-thresholded early exit with every
method, and its figure."""

from __future__ import annotations


def early_exit(
    score_files: dict[str, str],
    val_dir: str,
    model_dir: str,
    parameters: str,
    sweep_out: str,
    savings_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """The λ sweep and fixed exits of every method, and the layers and multiply-adds saved at
    target accuracies (λ chosen in sample and held out), from the per-position scores of
    decode_predictions, for the full check and (shortlist_rank > 0) the shortlist check; the costs
    from the cached model's info.json and the parameter table. `settings`: config early_exit."""
    from jtc.data.states import read_positions
    from jtc.evaluation import exit_tables as ee
    from jtc.files.io import read_json, read_table, read_tables
    from jtc.logs import ready
    from jtc.report.pages import write_table_with_page
    from jtc.settings import EarlyExitSettings

    ready()
    settings = EarlyExitSettings.of(settings)
    positions, info = read_positions(val_dir)
    model_info = read_json(f"{model_dir}/info.json")
    sweep, saved = ee.exit_tables(
        read_tables(score_files),
        positions,
        info["num_layers"],
        settings,
        ee.exit_costs(model_info, read_table(parameters), score_files),
        model=model,
        corpus=corpus,
        seed=seed,
        shortlist=(
            ee.shortlist_macs(model_info, settings.shortlist_rank, settings.shortlist_candidates)
            if settings.shortlist_rank
            else None
        ),
    )
    write_table_with_page(sweep, sweep_out)
    write_table_with_page(saved, savings_out)


def plot_early_exit(
    table: str, savings: str, png: str, pdf: str, *, model: str, corpus: str
) -> None:
    """Accuracy against mean layers run and against multiply-adds, per method: the λ sweep,
    the fixed exits, and the λ chosen for each target in sample and held out."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.early_exit import early_exit_figure

    ready()
    early_exit_figure(read_table(table), f"{model} on {corpus}", png, pdf, read_table(savings))
