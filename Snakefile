# jtc: linear shortcuts between transformer layers.
# Run: snakemake --cores 2 all        (the default experiment in config.yaml)
import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# jobs import the installed jtc package (setup.sh installs it in editable mode; under
# --sdm conda, envs/jtc.post-deploy.sh does); the config check below imports it from src/
sys.path.insert(0, os.path.join(workflow.basedir, "src"))


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/corpora.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/hidden.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/prediction.smk"
include: "workflow/rules/early_exit.smk"
include: "workflow/rules/submodules.smk"


rule all:
    default_target: True
    input:
        get_final_output(),
