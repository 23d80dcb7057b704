#!/usr/bin/env bash
# The GPU session of bench/README.md ("Scale benchmark on a GPU machine"): one device call per
# step, each a short command run from the repository root of a fresh copy of the working tree,
# with the folder made by bench/gpu_carry.sh carried along (carry/, 36 MiB):
#
#   bash bench/gpu_session.sh tests [SECONDS]  the carried wheels installed to /tmp/jtc-gpu/site,
#                                              the CUDA tests, SmolLM2-1.7B's shape made
#   bash bench/gpu_session.sh 1.7b [SECONDS]   the 1.7B paper-size run (bench_scale.py)
#   bash bench/gpu_session.sh 7b [SECONDS]     Llama-2-7B's shape made, and its run
#   bash bench/gpu_session.sh qwen [SECONDS]   Qwen2.5-1.5B's shape made (qwen2: attention
#                                              biases, a 151,936-token head), and its run
#
# Everything a later step needs lives under /tmp/jtc-gpu (the repository copy is laid anew each
# call); a step makes what it finds missing (a fresh machine) first, so any step can run first.
# What comes back is written under ${OUT:-/tmp/out}/STEP: the step's log, the machine's
# description, pytest's JUnit XML, bench_scale.py's JSON, and a .tar.gz of the run's config,
# Snakemake log, job logs, benchmark files and metrics tables.
#
# A step ends by SECONDS (defaults below: 210, 300, 330, 300; a device call's limit is 600): 60 s
# before, a run's Snakemake is stopped (SIGINT, SIGTERM, SIGKILL, GRACE seconds apart, then
# the jobs left), so that bench_scale.py still writes its report and the results are packed;
# finished jobs are kept, and the same step run again (same machine) runs only what is left.
#
# Settings (environment): JTC_CARRY (default REPO/carry), JTC_GPU_STATE (/tmp/jtc-gpu),
# JTC_PYTHON (python3), JTC_GPU_GRACE (12), and per run JTC_TRAIN, JTC_VALIDATION,
# JTC_MAX_TOKENS, JTC_METHODS, JTC_JUMPS (sub-module jump layers, 0: off), JTC_CORES,
# JTC_THREADS to replace the step's settings.
# --rehearse (or JTC_GPU_REHEARSE=1) rehearses the session on a machine without a GPU: the
# device is the CPU (JTC_TEST_DEVICE=cpu, CUDA hidden, models made on the CPU), both runs use
# the `tiny` shape, 300 + 100 sentences and 2 cores; everything else (install, tests, commands,
# methods, deadlines, results) is the same.
set -uo pipefail

usage() {
    echo "usage: bash bench/gpu_session.sh tests|1.7b|7b|qwen [SECONDS] [--rehearse]" >&2
    exit 2
}
STEP=${1:-}
shift || true
SECONDS_GIVEN=""
REHEARSE=${JTC_GPU_REHEARSE:-0}
for arg in "$@"; do
    case $arg in
        --rehearse) REHEARSE=1 ;;
        '' | *[!0-9]*) usage ;;
        *) SECONDS_GIVEN=$arg ;;
    esac
done
case $STEP in
    tests) DEFAULT_BUDGET=210 ;;
    1.7b) DEFAULT_BUDGET=300 ;;
    7b) DEFAULT_BUDGET=330 ;;
    qwen) DEFAULT_BUDGET=300 ;;
    *) usage ;;
esac
BUDGET=${SECONDS_GIVEN:-$DEFAULT_BUDGET}
START=$(date +%s)
DEADLINE=$((START + BUDGET))
RESERVE=60 # seconds kept at the end of a run step: Snakemake stopped, the report, the archive
GRACE=${JTC_GPU_GRACE:-12} # seconds between the signals that stop a run (stop_run)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
CARRY=$(cd "${JTC_CARRY:-$REPO/carry}" 2>/dev/null && pwd) || {
    echo "no carried folder at ${JTC_CARRY:-$REPO/carry} (bench/gpu_carry.sh makes it)" >&2
    exit 1
}
STATE=${JTC_GPU_STATE:-/tmp/jtc-gpu}
SITE=$STATE/site
PY=${JTC_PYTHON:-python3}
OUT_DIR=${OUT:-/tmp/out}/$STEP
mkdir -p "$OUT_DIR" "$STATE"
exec > >(tee -a "$OUT_DIR/session.log") 2>&1
TEE=$!
# the log complete before the step ends (and $OUT is copied back)
trap 'exec >&- 2>&-; wait "$TEE" 2>/dev/null' EXIT

if [[ $REHEARSE == 1 ]]; then
    DEVICE=cpu
    export JTC_TEST_DEVICE=cpu CUDA_VISIBLE_DEVICES=""
else
    DEVICE=cuda
fi
export PYTHONPATH=$SITE:$REPO/src
export PYTHONHASHSEED=0 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1

log() { echo "[gpu_session $STEP +$(($(date +%s) - START))s] $*"; }
left() { echo $((DEADLINE - $(date +%s))); }

# --- the machine: wheels, carried files, a description ---------------------------------------

pip_cmd() {
    if "$PY" -m pip --version >/dev/null 2>&1; then
        echo "$PY -m pip"
    else # no pip on this Python: run the carried pip wheel itself
        echo "$PY $(ls "$CARRY"/pip/pip-*.whl)/pip"
    fi
}

IMPORTS="import torch, transformers, safetensors, scipy, threadpoolctl, pyarrow, jsonschema, \
yaml, matplotlib, seaborn, sklearn, pytest, snakemake, jtc"

install_wheels() {
    # $1: all (every carried wheel) or missing (only distributions this Python lacks)
    local pip wheels
    pip=$(pip_cmd)
    if [[ $1 == all ]]; then
        wheels=("$CARRY"/wheels/*.whl)
    else
        mapfile -t wheels < <(PYTHONPATH='' "$PY" - "$CARRY"/wheels/*.whl <<'EOF'
import importlib.metadata as md
import sys
from pathlib import Path

for wheel in sys.argv[1:]:
    name = Path(wheel).name.split("-")[0]
    try:
        md.version(name)
    except md.PackageNotFoundError:
        print(wheel)
EOF
        )
    fi
    rm -rf "$SITE"
    # shellcheck disable=SC2086  # $pip is a command and its arguments
    $pip install -q --no-index --no-deps --disable-pip-version-check --target "$SITE" \
        "${wheels[@]}" || return 1
    "$PY" -c "$IMPORTS" || return 1
    touch "$SITE/.installed"
}

setup() {
    if [[ ! -f $SITE/.installed ]]; then
        log "installing the carried wheels to $SITE"
        # every carried wheel first (as rehearsed); where that breaks this Python's own packages,
        # only the distributions it lacks
        install_wheels all || {
            log "the carried wheels break an import here: installing only what $PY lacks"
            install_wheels missing || {
                log "jtc's dependencies cannot be imported: $IMPORTS"
                exit 1
            }
        }
    fi
    # the tokenizer and the text copied once: their time stamps stay those of the first call,
    # so a rerun in the same Snakemake folder does not see a newer corpus
    mkdir -p "$STATE/carry"
    [[ -d $STATE/carry/tokenizer ]] || cp -r "$CARRY/tokenizer" "$STATE/carry/tokenizer"
    [[ -f $STATE/carry/news.txt ]] || cp "$CARRY/news.txt" "$STATE/carry/news.txt"
}

describe() {
    {
        echo "step $STEP, rehearsal $REHEARSE, device $DEVICE, budget ${BUDGET}s, $(date -u)"
        echo "repository: $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
        echo "cores $(nproc); $(awk '/MemTotal/ {printf "%.0f GiB memory", $2 / 1048576}' /proc/meminfo)"
        df -h "$STATE" | tail -1
        nvidia-smi 2>&1 | head -20 || echo "no nvidia-smi"
        "$PY" - <<'EOF'
import importlib.metadata as md
import sys

import torch

print("python", sys.version.split()[0], "at", sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory)
names = "transformers safetensors pyarrow seaborn scikit-learn snakemake jsonschema pytest"
for name in names.split():
    try:
        print(name, md.version(name), md.distribution(name).locate_file(""))
    except md.PackageNotFoundError:
        print(name, "missing")
EOF
    } >"$OUT_DIR/machine.txt" 2>&1
    cat "$OUT_DIR/machine.txt"
}

run_pytest() { # NAME ARGS...: pytest, stopped 40 s before the deadline (the model is made then)
    local name=$1 limit
    shift
    limit=$(($(left) - 40))
    ((limit > 10)) || limit=10
    log "pytest $* (stopped after ${limit}s)"
    timeout -s INT -k 10 "$limit" "$PY" -m pytest -q -p no:cacheprovider "$@" \
        --junitxml "$OUT_DIR/pytest-$name.xml"
}

# --- models and runs -------------------------------------------------------------------------

make_model() { # SHAPE NAME: the model folder $STATE/models/NAME, made once
    local folder=$STATE/models/$2
    [[ -f $folder/.complete ]] && return 0
    log "making $1 as $folder"
    rm -rf "$folder"
    "$PY" bench/scale_model.py "$1" "$folder" --tokenizer "$STATE/carry/tokenizer" \
        --dtype bfloat16 --device "$DEVICE" || return 1
    touch "$folder/.complete"
}

running_for() { # PID SECONDS: whether PID still runs after up to SECONDS
    local _
    for _ in $(seq "$2"); do
        kill -0 "$1" 2>/dev/null || return 1
        sleep 1
    done
    kill -0 "$1" 2>/dev/null
}

processes() { # "pid ppid pgrp" of every process, from /proc (no procps needed)
    local stat line ppid pgrp
    for stat in /proc/[0-9]*/stat; do
        line=$(cat "$stat" 2>/dev/null) || continue
        read -r _ ppid pgrp _ <<<"${line##*) }" # after the command name: state, ppid, pgrp
        echo "$(basename "$(dirname "$stat")") $ppid $pgrp"
    done
}

stop_run() { # PID: bench_scale.py (with setsid, the leader of its own process group)
    local pid=$1 snake="" signal child
    for child in $(processes | awk -v p="$pid" '$2 == p {print $1}'); do
        tr '\0' ' ' <"/proc/$child/cmdline" 2>/dev/null | grep -q -- "-m snakemake" &&
            snake=$child
    done
    log "deadline: stopping Snakemake (${snake:-not found}); finished jobs are kept"
    # INT: Snakemake starts no new job and waits for its running ones; TERM, KILL: it is ended
    for signal in INT TERM KILL; do
        [[ -n $snake ]] && kill "-$signal" "$snake" 2>/dev/null
        running_for "$pid" "$GRACE" || return 0
    done
    # jobs still running hold Snakemake's output: end them (the processes of bench_scale.py's
    # group), and bench_scale.py writes its report
    log "ending the jobs still running"
    for child in $(processes | awk -v p="$pid" '$3 == p && $1 != p {print $1}'); do
        kill -KILL "$child" 2>/dev/null
    done
    running_for "$pid" "$GRACE" && kill -KILL "$pid"
}

pack() { # NAME: the run's small outputs into $OUT_DIR/NAME-results.tar.gz
    local work=$STATE/scale/$1 parts=()
    for part in config.yaml bench_scale.log logs benchmarks results/metrics; do
        [[ -e $work/$part ]] && parts+=("$part")
    done
    ((${#parts[@]})) && tar -czf "$OUT_DIR/$1-results.tar.gz" -C "$work" "${parts[@]}"
    du -sh "$OUT_DIR"/* | sed 's/^/  /'
}

scale_run() { # NAME TRAIN VALIDATION JUMPS METHODS
    local name=$1 budget pid status
    budget=$(($(left) - RESERVE))
    if ((budget < 30)); then
        log "no time left for $name (${budget}s)"
        return 1
    fi
    local args=(
        --model-dir "$STATE/models/$name" --workdir "$STATE/scale/$name"
        --text "$STATE/carry/news.txt"
        --train "${JTC_TRAIN:-$2}" --validation "${JTC_VALIDATION:-$3}"
        --max-tokens "${JTC_MAX_TOKENS:-128}"
        --methods "${JTC_METHODS:-$5}" --dtype bfloat16
        --submodule-jumps "${JTC_JUMPS:-$4}" --cores "${JTC_CORES:-$CORES}"
        --threads "${JTC_THREADS:-$THREADS}" --json "$OUT_DIR/$name.json"
    )
    log "bench_scale.py ${args[*]} (stopped after ${budget}s)"
    # its own process group, so that jobs left running can be found (setsid: util-linux)
    $(command -v setsid) "$PY" bench/bench_scale.py "${args[@]}" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && (($(left) > RESERVE)); do
        sleep 2
    done
    kill -0 "$pid" 2>/dev/null && stop_run "$pid"
    wait "$pid"
    status=$?
    log "$name: bench_scale.py exit $status"
    pack "$name"
    return "$status"
}

free_disk_for_7b() {
    # Llama-2-7B's shape needs 13.8 GB of weights, jtc's cached copy of them, 3.2 GB of states
    # and the maps: more than half of a 64 GiB disk. The other runs' weights and states (their
    # results came back with their own steps) are removed first, whatever is free.
    log "$(df -BG --output=avail "$STATE" | tail -1 | tr -dc 0-9) GB free: removing the other runs' models and states"
    local name
    for name in smollm2-1.7b qwen2.5-1.5b; do
        rm -rf "$STATE/models/$name" "$STATE/scale/$name/results/models" \
            "$STATE/scale/$name/results/hidden" "$STATE/scale/$name/results/parts"
    done
}

# --- the steps -------------------------------------------------------------------------------

if [[ $REHEARSE == 1 ]]; then
    SHAPE_17B=tiny SHAPE_7B=tiny SHAPE_QWEN=tiny CORES=2 THREADS=1
    SIZES_17B=(300 100) SIZES_7B=(300 100) SIZES_QWEN=(300 100)
else
    SHAPE_17B=smollm2-1.7b SHAPE_7B=llama-2-7b SHAPE_QWEN=qwen2.5-1.5b CORES=16 THREADS=2
    SIZES_17B=(9000 3000) SIZES_7B=(4500 1500) SIZES_QWEN=(9000 3000)
fi

log "start: budget ${BUDGET}s, state $STATE, results $OUT_DIR, carry $CARRY"
setup
status=0
case $STEP in
    tests)
        describe
        run_pytest cuda -m cuda tests/gpu/test_cuda.py tests/shortcuts/test_fit.py || status=1
        run_pytest models tests/model/test_sources_and_cache.py -k "head_only or bfloat16" || status=1
        log "tests: $([[ $status == 0 ]] && echo passed || echo FAILED)"
        make_model "$SHAPE_17B" smollm2-1.7b || status=1
        ;;
    1.7b)
        make_model "$SHAPE_17B" smollm2-1.7b || exit 1
        scale_run smollm2-1.7b "${SIZES_17B[@]}" 0 id,mat,njtc,nnjtc,tuned_lens || status=1
        ;;
    7b)
        free_disk_for_7b
        make_model "$SHAPE_7B" llama-2-7b || exit 1
        # mat with its maps into the last layer only (maps.pairs: last, the default: 2.1 GB in
        # float32, against 35 GB for all 528 pairs), beside the weights and their bfloat16 copy
        # (27 GB) and the states: within the 64 GiB disk, as the planning estimate says
        scale_run llama-2-7b "${SIZES_7B[@]}" 2 id,mat,rrr,tuned_lens || status=1
        ;;
    qwen)
        make_model "$SHAPE_QWEN" qwen2.5-1.5b || exit 1
        scale_run qwen2.5-1.5b "${SIZES_QWEN[@]}" 2 id,mat,rrr,tuned_lens || status=1
        ;;
esac
log "done: exit $status"
exit "$status"
