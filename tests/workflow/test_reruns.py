"""What a changed setting reruns in a copy of the finished tiny run: exactly the jobs that read
it (the split sizes, positions, the summary, early exit and shortlist settings, the trained
methods, the compute settings); and, for every key of the pruning block, exactly the rules
config/README.md's reruns column names (jtc.pipeline.reruns), planned on one finished run with
depth pruning, its measures, benchmarks and pruned model."""

import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from fake_gpu import fake_nvidia_smi
from harness import (
    TINY_PRUNING,
    copy_run,
    make_tiny_project,
    planned,
    read_config,
    rules_run,
    run_snakemake,
    run_snakemake_all,
    selected,
    write_config,
)

from jtc.pipeline.config_docs import README
from jtc.pipeline.reruns import (
    JOB_GRAPH,
    TARGETS,
    node_of,
    read_job_graph,
    snakemake_job_graph,
)
from jtc.pipeline.rule_reads import read_workflow
from jtc.settings import SCHEMA
from jtc.shortcuts.maps import load_map, read_metadata

pytestmark = pytest.mark.workflow


# what a smaller validation split reruns: validation states and what reads them, nothing else;
# fit_map scores every pair of mat and rrr on them as it solves the maps (the same maps)
VALIDATION_RERUN = {
    "extract_hidden": 2,
    "fit_map": 2,
    "parameter_table": 2,
    "r2_table": 2,
    "plot_r2": 2,
    "decode_predictions": 2,
    "prediction_table": 2,
    "plot_prediction": 2,
    "prediction_examples": 2,
    "early_exit": 2,
    "plot_early_exit": 2,
    "headline_table": 1,
    "all": 1,
}


# a change to the training states: they, the fits, and everything after them (the validation
# states stay)
TRAINING_RERUN = {**VALIDATION_RERUN, "fit_shortlist": 2}


def rerun_changed(finished, workdir, **changes):
    """Copy a finished run, change top-level keys of its config, rerun `all`: the rules run."""
    config = {**read_config(finished), **changes}
    copy_run(finished, workdir, config)
    return rules_run(run_snakemake(workdir, "all"))


def plan_changed(finished, workdir, **changes):
    """As rerun_changed, but a dry run: the rules a rerun would run (the same jobs: a run runs
    the jobs it plans, and no resolve_model checkpoint is pending in a finished run), without
    running them. For the tests that check which jobs rerun and nothing the jobs write."""
    config = {**read_config(finished), **changes}
    copy_run(finished, workdir, config)
    return rules_run(run_snakemake(workdir, "all", "-n"))


def test_validation_size_reruns_only_what_reads_the_validation_split(tiny_run, tmp_path):
    maps = "results/maps/gpt/mini/mat.safetensors"
    ran = rerun_changed(tiny_run, tmp_path, sizes={"train": 48, "validation": 12})
    assert ran == VALIDATION_RERUN
    last = read_metadata(tiny_run / maps)["pairs"][-1][1]
    for source in range(last):
        before, after = (load_map(run / maps, source, last).tensors for run in (tiny_run, tmp_path))
        assert all(np.array_equal(before[p], after[p]) for p in before)
    assert (
        pq.read_table(tmp_path / "results/hidden/gpt/mini/validation/positions.parquet").num_rows
        == 12
    )


def test_training_size_reruns_the_fits_and_everything_after_them(tiny_run, tmp_path):
    ran = plan_changed(tiny_run, tmp_path, sizes={"train": 40, "validation": 16})
    assert ran == TRAINING_RERUN


def test_positions_per_sentence_reruns_the_training_states_and_what_reads_them(tiny_run, tmp_path):
    """positions_per_sentence: 3 extracts three rows per training sentence (the validation
    states stay, one row per sentence) and refits on them; the map files count both."""
    hidden = "results/hidden/gpt/mini/{split}/positions.parquet"
    assert rerun_changed(tiny_run, tmp_path, positions_per_sentence=3) == TRAINING_RERUN
    val = hidden.format(split="validation")
    assert (tmp_path / val).stat().st_mtime_ns == (tiny_run / val).stat().st_mtime_ns
    before = pq.read_table(tiny_run / hidden.format(split="train")).column("sentence_id")
    after = pq.read_table(tmp_path / hidden.format(split="train")).column("sentence_id")
    assert len(after) == 3 * len(before) and set(after.to_pylist()) == set(before.to_pylist())
    meta = read_metadata(tmp_path / "results/maps/gpt/mini/mat.safetensors")
    assert meta["n_train"] == len(before) and meta["training_rows"] == len(after)


def test_a_summary_setting_reruns_only_the_summary_and_its_figure(tiny_run, tmp_path):
    ran = plan_changed(tiny_run, tmp_path, prediction={"bootstrap": 200})
    assert ran == {"prediction_table": 2, "plot_prediction": 2, "headline_table": 1, "all": 1}


def test_an_early_exit_setting_reruns_only_the_sweep_and_its_figure(tiny_run, tmp_path):
    # (the confidences are not recomputed)
    ran = plan_changed(tiny_run, tmp_path, early_exit={"tau": 2.0})
    assert ran == {"early_exit": 2, "plot_early_exit": 2, "headline_table": 1, "all": 1}


def test_the_shortlist_settings_rerun_the_decoding_and_what_reads_it(tiny_run, tmp_path):
    # each setting alone, planned against the finished run (turning the shortlist off is run)
    # candidates: the checks decoding computes; the fitted factorisation stays
    ran = plan_changed(tiny_run, tmp_path, early_exit={"shortlist_candidates": 3})
    reads_scores = {
        "decode_predictions": 2,
        "prediction_table": 2,
        "plot_prediction": 2,
        "early_exit": 2,
        "plot_early_exit": 2,
        "headline_table": 1,
        "all": 1,
    }
    assert ran == reads_scores
    config = read_config(tmp_path)
    config["early_exit"] = {"shortlist_rank": 2}  # the factorisation, then the same
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all", "-n")) == {"fit_shortlist": 2, **reads_scores}
    config["early_exit"]["shortlist_rank"] = 0  # off: no factorisation, no shortlist rows
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all")) == reads_scores
    sweep = pq.read_table(tmp_path / "results/metrics/gpt/mini/early_exit.parquet")
    assert set(sweep.column("check").to_pylist()) == {"full", None}  # (fixed exits: none)


TRAINED = ["njtc", "nnjtc", "one_jump", "one_jump_selected", "tuned_lens"]


def test_trained_methods_reach_every_table_and_rerun_alone(tiny_run, tmp_path):
    from safetensors.numpy import load_file

    from jtc.shortcuts.maps import load_map, read_metadata

    # the finished tiny run, gpt only, the trained methods added: its model and states stay
    config = read_config(tiny_run)
    config["models"] = {"gpt": config["models"]["gpt"]}
    config["methods"] = ["id", "mat", "rrr", *TRAINED]
    config["training"] = {m: {"max_epochs": 3, "batch_size": 8} for m in TRAINED}
    copy_run(tiny_run, tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, "all"))
    assert not {"resolve_model", "prepare_corpus", "extract_hidden"} & set(ran), ran
    # one fit_map job for the closed-form methods (mat, rrr), one train_map job for each trained
    # method; 2 layers: njtc, nnjtc and rrr (NJTC's pairs) fit every pair (auto), the tuned lens
    # the pairs into the last
    assert ran["fit_map"] == 1 and ran["train_map"] == len(TRAINED)
    # training reports its progress in the job's log: pairs done, time, time left
    njtc_log = (tmp_path / "logs/train_map/gpt/mini/njtc.log").read_text()
    assert "train njtc: 3/3 layer pairs (100%)" in njtc_log
    assert (
        "train tuned_lens: 2/2 layer pairs (100%)"
        in (tmp_path / "logs/train_map/gpt/mini/tuned_lens.log").read_text()
    )
    metrics = tmp_path / "results/metrics/gpt/mini"
    r2 = pq.read_table(metrics / "r2.parquet").to_pylist()
    pairs = {
        m: {(r["source_layer"], r["target_layer"]) for r in r2 if r["method"] == m}
        for m in ["rrr", *TRAINED]
    }
    assert pairs == {
        "rrr": {(0, 1), (0, 2), (1, 2)},
        "njtc": {(0, 1), (0, 2), (1, 2)},
        "nnjtc": {(0, 1), (0, 2), (1, 2)},
        "one_jump": {(0, 2), (1, 2)},
        "one_jump_selected": {(0, 2), (1, 2)},
        "tuned_lens": {(0, 2), (1, 2)},
    }
    assert all(np.isfinite(r["r2"]) for r in r2)
    for name in ("prediction", "early_exit", "early_exit_savings"):
        methods = set(pq.read_table(metrics / f"{name}.parquet").column("method").to_pylist())
        assert methods == {"id", "mat", "rrr", *TRAINED}, name
    assert all(f"| {m}, layer 1 |" in (metrics / "examples.md").read_text() for m in TRAINED)
    counts = {r["method"]: r for r in pq.read_table(metrics / "parameters.parquet").to_pylist()}
    assert counts["mat"]["parameters"] == 16 * 16 and counts["njtc"]["parameters"] == 2 * 16
    assert counts["rrr"]["parameters"] == 2 * 16  # rank 1, as NJTC's
    assert counts["nnjtc"]["parameters"] == 2 * 16 + 2 * 16 and counts["nnjtc"]["buffers"] == 32
    assert counts["tuned_lens"]["parameters"] == 16 * 16 + 16
    # one map for every layer: what early exit keeps is one map's parameters, not L maps'
    assert counts["one_jump"]["parameters"] == counts["nnjtc"]["parameters"]
    assert counts["one_jump"]["exit_parameters"] == counts["one_jump"]["parameters"]
    assert counts["nnjtc"]["exit_parameters"] == 2 * counts["nnjtc"]["parameters"]  # 0->2, 1->2
    assert counts["one_jump_selected"]["exit_parameters"] == counts["nnjtc"]["parameters"]
    one = tmp_path / "results/maps/gpt/mini/one_jump.safetensors"
    assert load_map(one, 0, 2).tensors.keys() == load_map(one, 1, 2).tensors.keys()
    assert all(
        np.array_equal(load_map(one, 0, 2).tensors[k], load_map(one, 1, 2).tensors[k])
        for k in load_map(one, 0, 2).tensors
    )
    # the selected map is N-NJTC's own map from the chosen layer (same settings, same seeds),
    # used from both layers
    selected = tmp_path / "results/maps/gpt/mini/one_jump_selected.safetensors"
    chosen = read_metadata(selected)["selected_source"]
    assert set(read_metadata(selected)["mean_cosine"]) == {"0", "1"}
    nnjtc_map = load_map(tmp_path / "results/maps/gpt/mini/nnjtc.safetensors", chosen, 2)
    for source in (0, 1):
        got = load_map(selected, source, 2).tensors
        assert got.keys() == nnjtc_map.tensors.keys()
        assert all(np.array_equal(got[k], nnjtc_map.tensors[k]) for k in got)
    assert (tmp_path / "results/figures/gpt/mini/r2.png").stat().st_size

    # one method's training setting: its train_map job and what reads the maps, nothing else
    # (not mat's and rrr's fit_map job, nor the other trained methods'); then nothing is left
    reads_njtc = {
        "train_map": 1,
        "r2_table": 1,
        "plot_r2": 1,
        "parameter_table": 1,
        "decode_predictions": 1,
        "prediction_table": 1,
        "plot_prediction": 1,
        "prediction_examples": 1,
        "early_exit": 1,
        "plot_early_exit": 1,
        "headline_table": 1,
        "all": 1,
    }
    config["training"]["njtc"]["learning_rate"] = 0.02
    write_config(tmp_path, config)
    assert rules_run(run_snakemake(tmp_path, "all")) == reads_njtc
    assert rules_run(run_snakemake(tmp_path, "all", "-n")) == {}
    # the rows it trains on (training.njtc.positions) and its epochs: planned alike, njtc's job
    for key, value in (("positions", 1), ("max_epochs", 4)):
        changed = {**config, "training": {**config["training"]}}
        changed["training"]["njtc"] = {**config["training"]["njtc"], key: value}
        write_config(tmp_path, changed)
        plan = run_snakemake(tmp_path, "all", "-n")
        assert rules_run(plan) == reads_njtc, key
        assert planned(plan, "method") == {"njtc"}, key
    write_config(tmp_path, config)
    # (the maps of these settings, for the same-seed check below; the header's key order is
    # not fixed by safetensors: compare tensors and metadata)
    nnjtc = tmp_path / "results/maps/gpt/mini/nnjtc.safetensors"
    first, first_meta = load_file(nnjtc), read_metadata(nnjtc)

    # NJTC's pairs are rrr's too, unless training.rrr sets its own (read from the r² table:
    # only the fits and the table are run)
    r2_target = str((metrics / "r2.parquet").relative_to(tmp_path))

    def pairs_of(method):
        r2 = pq.read_table(metrics / "r2.parquet").to_pylist()
        return {(r["source_layer"], r["target_layer"]) for r in r2 if r["method"] == method}

    config["training"]["njtc"]["targets"] = "last"
    write_config(tmp_path, config)
    ran = rules_run(run_snakemake(tmp_path, r2_target))
    assert ran == {"fit_map": 1, "train_map": 1, "r2_table": 1}  # rrr's and njtc's, no other
    assert pairs_of("njtc") == pairs_of("rrr") == {(0, 2), (1, 2)}
    assert pairs_of("nnjtc") == {(0, 1), (0, 2), (1, 2)}
    config["training"]["rrr"] = {"targets": "auto"}  # its own: every pair, as before
    write_config(tmp_path, config)
    run_snakemake(tmp_path, r2_target)
    assert pairs_of("njtc") == {(0, 2), (1, 2)} and pairs_of("rrr") == {(0, 1), (0, 2), (1, 2)}

    # back to the settings above: same seed, same maps, bit for bit
    config["training"]["njtc"].pop("targets")
    config["training"].pop("rrr")
    write_config(tmp_path, config)
    # (rrr's targets stay auto, its own then njtc's again: its fit_map job is not rerun)
    assert rules_run(run_snakemake(tmp_path, r2_target)) == {"train_map": 1, "r2_table": 1}
    assert pairs_of("njtc") == pairs_of("rrr") == {(0, 1), (0, 2), (1, 2)}
    again = load_file(nnjtc)
    assert sorted(again) == sorted(first) and read_metadata(nnjtc) == first_meta
    assert all(np.array_equal(again[k], first[k]) for k in first)


def test_compute_settings_rerun_what_they_change(tiny_run, tmp_path):
    """device_map (where the model runs) reruns the jobs that run the model, not the cache;
    dtype (what the model is cached and run in) reruns the model's whole pipeline."""
    config = read_config(tiny_run)
    config["models"]["gpt"]["device_map"] = "auto"
    copy_run(tiny_run, tmp_path, config)
    # on a machine with a GPU (nvidia-smi faked): on one without, device_map is refused
    gpu = fake_nvidia_smi(tmp_path / "fake-bin")
    plan = rules_run(run_snakemake(tmp_path, "all", "-n", env=gpu))
    assert "resolve_model" not in plan and plan["extract_hidden"] == 2  # gpt's two splits
    config["models"]["gpt"].pop("device_map")
    config["models"]["gpt"]["dtype"] = "bfloat16"
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "all", "-n")
    assert rules_run(proc)["resolve_model"] == 1 and planned(proc, "model") == {"gpt"}


# ---- every key of the pruning block -----------------------------------------------------------

# the pruning block of the finished run the keys are changed in (GPT-2: 2 blocks, length 1)
PRUNING = {**TINY_PRUNING, "benchmarks": {"tasks": ["arc_easy"], "limit": 2}}
# each key of the pruning block, changed: (its new value, whether the change alters what the
# rules compute from it: False where the tiny run cannot show it, its one corpus pruned either
# way)
CHANGES = {
    "models": ([], True),
    "corpora": (["mini"], False),
    "lengths": ([1], True),
    "variants": (["drop", "mat", "replaceme"], True),
    "rank": (1, True),
    "ridge": (0.001, True),
    "skip_first_token": (True, True),
    "calibration.text": ("sentences", True),
    "calibration.windows": (3, True),
    "calibration.window_tokens": (8, True),
    "calibration_sentences": (24, True),
    # the held-out sentences, max(evaluation, selected) + prompts, change too: the calibration
    # windows leave out their documents (jtc.pruning.windows)
    "evaluation_sentences": (9, True),
    "selected_sentences": (7, True),
    "measures_in_all": (True, True),
    "export_length": (1, True),
    "export_selection": ("block_influence", True),
    "export_variant": ("drop", True),
    "also_measure": (["drop@block_influence"], True),
    "benchmarks.tasks": (["piqa"], True),
    "benchmarks.shots": ({"arc_easy": 0}, True),
    "benchmarks.limit": (3, True),
    "benchmarks.in_all": (True, True),
    "context.lengths": ([8], True),
    "context.windows": (1, True),
    "generation.prompts": (1, True),
    "generation.new_tokens": (2, True),
    "cosine.epochs": (1, True),
    "cosine.learning_rate": (0.01, True),
    "cosine.batch_tokens": (64, True),
}
COMPUTED = "where a value computed from it changes,"


def pruning_keys() -> set[str]:
    import yaml

    block = yaml.safe_load(SCHEMA.read_text())["properties"]["pruning"]["properties"]
    return {
        f"{key}.{sub}" if "properties" in spec else key
        for key, spec in block.items()
        for sub in spec.get("properties", [None])
    }


def column_rules(key: str, computed: bool) -> set[str]:
    """The rules config/README.md's reruns column names for pruning.`key` (with those that
    rerun where a value computed from it changes, or without)."""
    text = README.read_text()
    table = text[text.index("<!-- keys pruning -->") :]
    row = next(line for line in table.splitlines() if line.startswith(f"| `{key}` |"))
    cell = row.rstrip(" |").rsplit(" | ", 1)[1]
    whole, _, partial = cell.partition(COMPUTED)
    return _named(whole) | (_named(partial) if computed else set())


def _named(part: str) -> set[str]:
    """The rules a part of a reruns cell names; "`a` and every rule after it (n rules)": a's
    jobs and every job after them in the job graph."""
    names = set(re.findall(r"`(\w+)`", part))
    if "every rule after" not in part:
        return names
    graph = read_job_graph(JOB_GRAPH)
    seen = {node for node in graph if node_of(node)[0] in names}
    todo = list(seen)
    while todo:
        for node in graph[todo.pop()]:
            if node not in seen:
                seen.add(node)
                todo.append(node)
    return {node_of(node)[0] for node in seen}


def test_every_key_of_the_pruning_block_has_a_change_below():
    assert set(CHANGES) == pruning_keys()


@pytest.fixture(scope="module")
def pruning_run(tmp_path_factory):
    """A finished run of the tiny GPT-2 alone with depth pruning, its measures, benchmarks and
    pruned model (its tokenizer given an EOS token, lm-eval's prefix); and the rules with jobs
    in it."""
    from transformers import AutoTokenizer

    work = make_tiny_project(tmp_path_factory.mktemp("pruning-run"), models=("gpt",))
    tokenizer = AutoTokenizer.from_pretrained(work / "tiny-gpt2")
    tokenizer.eos_token = "[SEP]"
    tokenizer.save_pretrained(work / "tiny-gpt2")
    write_config(work, {**read_config(work), "pruning": PRUNING})
    return work, set(rules_run(run_snakemake(work, *TARGETS)))


@pytest.fixture(scope="module")
def planned_changes(request, pruning_run, tmp_path_factory):
    """{key: the rules a dry run plans} for every key the session's tests change, planned two
    at a time, each in its own copy of the pruning run."""
    work, _ = pruning_run
    runs = {}
    for key in selected(request, "test_a_pruning_key_reruns_the_rules_its_column_names", "key"):
        config = read_config(work)
        *block, name = ["pruning", *key.split(".")]
        node = config
        for part in block:
            node = node.setdefault(part, {})
        node[name] = CHANGES[key][0]
        copy = copy_run(work, tmp_path_factory.mktemp(key.replace(".", "-")), config)
        runs[key] = (copy, [*TARGETS, "-n"], {})
    return {key: set(rules_run(proc)) for key, proc in run_snakemake_all(runs).items()}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_pruning_key_reruns_the_rules_its_column_names(key, pruning_run, planned_changes):
    _, present = pruning_run
    rules = read_workflow().rules
    ran = {rule for rule in planned_changes[key] if rules[rule].has_output}  # not the targets
    assert ran == column_rules(key, CHANGES[key][1]) & present


def test_the_job_graph_is_the_one_snakemake_plans(pruning_run):
    """workflow/job_graph.yaml (python -m jtc.pipeline.reruns), among the jobs of the pruning run:
    the same jobs read the same jobs' outputs."""
    work, _ = pruning_run
    here = snakemake_job_graph(work, work / "config.yaml")
    written = read_job_graph(JOB_GRAPH)
    assert set(here) <= set(written)
    assert here == {node: [n for n in written[node] if n in here] for node in here}
