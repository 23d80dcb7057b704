"""What a config key reruns, read off the workflow (jtc.pipeline.rule_reads, jtc.pipeline.reruns):
the keys a rule's params read through settings objects, lookups and the workflow's functions, a
way of reaching the config it does not know refused by name, the job graph's rules, and the
README's cells. Whether a dry run plans the same: tests/workflow/test_reruns.py."""

import textwrap

import pytest

from jtc.pipeline.config_docs import LISTED, reruns_text
from jtc.pipeline.reruns import JOB_GRAPH, Reruns, node_of, read_job_graph, reruns
from jtc.pipeline.rule_reads import Read, ReadError, params_read, read_workflow


def workflow(tmp_path, rules: str):
    """A workflow folder whose Snakefile includes one rule file holding `rules`."""
    folder = tmp_path / "workflow"
    (folder / "rules").mkdir(parents=True)
    (folder / "Snakefile").write_text('include: "rules/family.smk"\n')
    (folder / "rules" / "family.smk").write_text(textwrap.dedent(rules))
    return folder


def keys(reads, partial=None):
    return {".".join(r.key) for r in reads if partial is None or r.partial == partial}


def test_settings_objects_lookups_and_functions_are_read(tmp_path):
    folder = workflow(
        tmp_path,
        """
        from jtc.settings import IntervalSettings


        def size(wildcards):
            return config["sizes"][wildcards.split]


        rule table:
            output:
                "t_{split}.txt",
            params:
                n=size,
                top_k=max(config["prediction"]["top_k"]),
                settings=IntervalSettings.param(config),
                device=lambda w: config["models"][w.model].get("device_map"),
            shell:
                "touch {output}"
        """,
    )
    reads = params_read(folder)["table"]
    assert keys(reads, partial=False) == {
        "sizes.{split}",
        "prediction.top_k",
        "prediction.bootstrap",
        "prediction.confidence_level",
        "models.*.device_map",
    }
    assert keys(reads, partial=True) == {"prediction.top_k"}  # its largest value only
    size = next(r for r in reads if r.key[0] == "sizes")
    assert size.matches(("sizes", "train"), "train") and not size.matches(
        ("sizes", "train"), "validation"
    )


@pytest.mark.parametrize(
    "param, refused",
    [
        ("helper(config)", "the whole config is given to a function"),
        ("CHOSEN", "CHOSEN is derived from the config while planning"),
    ],
)
def test_an_unknown_way_of_reading_the_config_is_refused_by_name(tmp_path, param, refused):
    folder = workflow(
        tmp_path,
        f"""
        CHOSEN = sorted(config["methods"])


        rule table:
            output:
                "t.txt",
            params:
                x={param},
            shell:
                "touch {{output}}"
        """,
    )
    with pytest.raises(ReadError, match=f"rule table, params.x: {refused}"):
        params_read(folder)


def test_the_measures_read_the_stand_ins_and_the_selection_rule_not_the_export():
    reads = params_read()
    pruning = {
        rule: {k for k in keys(reads[rule]) if k.startswith("pruning.")}
        for rule in ("context_perplexity", "generation_fidelity", "run_benchmarks")
    }
    measured = {"pruning.variants", "pruning.export_selection", "pruning.also_measure"}
    assert pruning["run_benchmarks"] == measured | {
        "pruning.benchmarks.tasks",
        "pruning.benchmarks.shots",
        "pruning.benchmarks.limit",
    }
    assert pruning["context_perplexity"] == measured | {
        "pruning.calibration",
        "pruning.calibration.text",  # the held-out sentences (jtc.pruning.windows), windows only
        "pruning.evaluation_sentences",
        "pruning.selected_sentences",
        "pruning.generation.prompts",
        "pruning.calibration_sentences",
        "pruning.context.lengths",
        "pruning.context.windows",
    }
    assert pruning["generation_fidelity"] == measured | {
        "pruning.evaluation_sentences",
        "pruning.selected_sentences",
        "pruning.generation.prompts",
        "pruning.generation.new_tokens",
    }
    assert reruns("pruning.export_variant").rules() == {"export_pruned"}
    # the stand-ins' maps change with ridge, and the measures read them: they rerun by input
    assert {"context_perplexity", "run_benchmarks"} <= reruns("pruning.ridge").rules()


def test_a_key_of_one_split_reruns_that_splits_jobs_and_what_reads_them():
    validation = reruns("sizes.validation")
    assert "extract_hidden[validation]" in validation.whole
    assert not {"extract_hidden[train]", "train_map"} & set(validation.whole)
    # fit_map scores every pair of mat and rrr on the validation states as it solves the maps
    assert "fit_map" in validation.whole
    assert {"extract_hidden[train]", "fit_map"} <= set(reruns("positions_per_sentence").whole)


def test_the_job_graph_has_every_rule_with_outputs():
    """(download_corpus but: the default experiment's corpora are packaged, and only the
    corpora's keys, which have notes, reach it)"""
    rules = read_workflow().rules
    in_graph = {node_of(node)[0] for node in read_job_graph(JOB_GRAPH)}
    assert in_graph == {n for n, r in rules.items() if r.has_output} - {"download_corpus"}


def test_a_cell_lists_the_rules_or_the_first_ones_and_how_many_follow():
    few = Reruns(("a_rule", "b_rule[train]"), ("c_rule",), ("a_rule",), ("c_rule",))
    assert reruns_text("x", "adds jobs", few) == (
        "adds jobs; `a_rule`, `b_rule` (train); where a value computed from it changes, `c_rule`"
    )
    nodes = tuple(f"rule_{i}" for i in range(LISTED + 1))
    many = Reruns(nodes, (), ("rule_0",), ())
    assert reruns_text("x", None, many) == f"`rule_0` and every rule after it ({LISTED + 1} rules)"
    with pytest.raises(ValueError, match="names rules; they are generated"):
        reruns_text("x", "reruns `a_rule`", few)
    with pytest.raises(ValueError, match="no rule's params read it and it has no reruns note"):
        reruns_text("x", None, Reruns((), (), (), ()))


def test_a_read_of_a_block_matches_its_keys_and_a_wildcard_any_key():
    assert Read(("pruning", "cosine")).matches(("pruning", "cosine", "epochs"), None)
    assert Read(("models", "*", "device_map")).matches(("models", "gpt", "device_map"), None)
    assert not Read(("pruning", "lengths")).matches(("pruning", "rank"), None)
