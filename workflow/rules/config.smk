# The checked config (schema, defaults, what the model folders and corpora already tell), the
# names the rules use (the models, corpora, methods) and the wildcard constraints.
# Included first: every other file reads `config` as checked here. The rule files also use
# paths (where every result lives), VARIANTS (the sub-module variants) and _alternatives (a
# regex matching exactly the names given).
import copy

from snakemake.exceptions import WorkflowError

from jtc import paths
from jtc.shortcuts.parts import VARIANTS
from jtc.pipeline.config import ConfigError, command_line_config
from jtc.model.sources import local_width
from jtc.pipeline.planning import Experiment, checked_config, rows_note
from jtc.pipeline.planning import alternatives as _alternatives

_given = config
if (
    workflow.modifier.skip_configfile
    and workflow.overwrite_configfiles
    and not workflow.config_settings.replace_workflow_config
):
    # jtc as a module (docs/deploying.md) given its config by the including workflow, without
    # jtc's profile: Snakemake merged the --configfile into the deployed config/config.yaml;
    # the file given replaces it instead, as in direct use (workflow/profiles/default)
    _given = copy.deepcopy(workflow.config_settings.overwrite_config)
try:
    # --config key=value alone sets keys of config/config.yaml (jtc.pipeline.config.command_line_config)
    _in_force = command_line_config(
        _given,
        DEFAULT_CONFIG,
        workflow.config_settings.overwrite_config,
        bool(workflow.overwrite_configfiles),
    )
    _checked = checked_config(_in_force, workflow.configfiles)
except ConfigError as err:
    raise WorkflowError(f"invalid configuration: {err}") from None
config.clear()
config.update(_checked)
_rows_note = rows_note(
    config, {name: local_width(spec) for name, spec in config["models"].items()}
)
if _rows_note and workflow.is_main_process:
    print(_rows_note, file=sys.stderr)

EXPERIMENT = Experiment.of(config)  # jtc.pipeline.planning.Experiment
MODELS = EXPERIMENT.models
CORPORA = EXPERIMENT.corpora
METHODS = EXPERIMENT.methods
MAP_METHODS = EXPERIMENT.map_methods
# solved in closed form (mat, rrr), one fit_map job per (model, corpus) for all of them;
# trained by gradient descent, one train_map job per (model, corpus, method)
CLOSED_METHODS = EXPERIMENT.closed_methods
TRAINED_METHODS = EXPERIMENT.trained_methods
PREDICTING = EXPERIMENT.predicting
SUBMODULES = EXPERIMENT.submodules
SUBMODULE_CORPORA = EXPERIMENT.submodule_corpora
methods_for = EXPERIMENT.methods_for  # the configured methods that apply to a model


wildcard_constraints:
    model=_alternatives(MODELS),
    corpus=_alternatives(CORPORA),
    split="train|validation",
    method=_alternatives(config["methods"]),
