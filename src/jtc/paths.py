"""Where every result lives: the one list of file patterns, used by the workflow's rules (with
Snakemake wildcards in braces, relative to the working directory) and by the API (filled in,
under any results folder)."""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
# a corpus file fetched by URL, named with its source's suffix (download): a Leipzig archive
# data/downloads/NAME.tar.gz, a MediaWiki dump data/downloads/NAME.xml.bz2
DOWNLOAD = "data/downloads/{corpus}{suffix}"
DOWNLOAD_SUFFIXES = {"leipzig": ".tar.gz", "mediawiki": ".xml.bz2"}  # the sources fetched by URL
JOINED = "data/joined"  # model files joined from the parts they ship in (jtc.model.joined)
CORPUS = f"{RESULTS}/corpora/{{corpus}}.parquet"  # the sentence table
MODEL = f"{RESULTS}/models/{{model}}"  # the cached model (safetensors, tokenizer, info.json)
HIDDEN = f"{RESULTS}/hidden/{{model}}/{{corpus}}/{{split}}"  # layer states, one file a layer
PARTS = f"{RESULTS}/parts/{{model}}/{{corpus}}/{{split}}"  # block parts' inputs and outputs
# a method's maps from every source layer (written by fit_map for mat and rrr, train_map for a
# trained method); mat's and rrr's keep the pairs config maps.pairs says
MAP = f"{RESULTS}/maps/{{model}}/{{corpus}}/{{method}}.safetensors"
# r² of every pair of a closed-form method, scored by fit_map as it solves the maps
MAP_R2 = f"{RESULTS}/maps/{{model}}/{{corpus}}/{{method}}_r2.parquet"
PART_MAP = f"{RESULTS}/maps/{{model}}/{{corpus}}/parts.safetensors"  # a map per block part
# the low-rank factorisation of the head that the shortlist exit check uses
# (jtc.evaluation.shortlist)
SHORTLIST = f"{RESULTS}/maps/{{model}}/{{corpus}}/shortlist.safetensors"
SCORES = f"{RESULTS}/predictions/{{model}}/{{corpus}}/{{method}}.parquet"  # per position
REPLACED = f"{RESULTS}/submodules/{{model}}/{{corpus}}/replaced.parquet"
# depth pruning: each span's maps and calibration statistics, the chosen spans, the runs
PRUNING = f"{RESULTS}/pruning/{{model}}/{{corpus}}"
PRUNED = f"{RESULTS}/pruned/{{model}}/{{corpus}}"  # the pruned model, a Hugging Face folder
BENCHMARK_TASKS = f"{RESULTS}/benchmarks/tasks"  # lm-eval's task files (jtc.measures.tasks)
METRICS = f"{RESULTS}/metrics/{{model}}/{{corpus}}"  # the tables, e.g. r2.parquet
FIGURES = f"{RESULTS}/figures/{{model}}/{{corpus}}"  # the figures, e.g. prediction.png
HEADLINE = f"{RESULTS}/metrics/headline.parquet"  # the headline numbers of every model, corpus
LANDING = f"{RESULTS}/report/landing.rst"  # the report's landing page, with those numbers


def download(corpus: str, source: str) -> str:
    """Where a corpus of a source fetched by URL (DOWNLOAD_SUFFIXES) is downloaded to."""
    return DOWNLOAD.format(corpus=corpus, suffix=DOWNLOAD_SUFFIXES[source])


def metric(name: str) -> str:
    """The pattern of a metric table, e.g. metric("r2.parquet")."""
    return f"{METRICS}/{name}"


def figure(name: str) -> str:
    """The pattern of a figure, e.g. figure("r2_{method}.png")."""
    return f"{FIGURES}/{name}"


def pruning(name: str) -> str:
    """The pattern of a depth-pruning file, e.g. pruning("maps.safetensors")."""
    return f"{PRUNING}/{name}"


def under(results: str | Path, pattern: str, **wildcards: object) -> Path:
    """A result's path under the folder `results` (a finished run's results/ folder)."""
    relative = Path(pattern.format(**wildcards)).relative_to(RESULTS)
    return Path(results) / relative


def fill(pattern: str, **values: str) -> str:
    """A pattern with some wildcards filled in and the others kept, e.g.
    fill(HIDDEN, split="train") == "results/hidden/{model}/{corpus}/train"."""
    for name, value in values.items():
        pattern = pattern.replace(f"{{{name}}}", value)
    return pattern
