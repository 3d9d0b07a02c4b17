#!/usr/bin/env bash
# benchmarks/gpu_checks.sh's parts fitted into one call of under ten minutes on a lent GPU
# machine, whose results come back only from the folder $OUT (at most 8 files):
#
#     benchmarks/gpu_wheels.sh; mkdir -p .gpu/data; cp ../shared/data/multi30k/* .gpu/data/
#     (on the GPU machine, with .whl and .gpu carried)  benchmarks/gpu_one_call.sh
#
# The correctness parts (tests, cli), the two-minute Multi30k run, the loss's peak memory
# (step_cost.py) and a first compile of the `base` step go side by side; the timed parts
# (speed, the compiled profile, decode, the eager profile, then speed-compiled in whatever time
# is left) run alone, one after another. $OUT/results.tar.gz (every log and report) is
# rewritten as each part ends, so a call stopped at its limit still returns what finished; the
# Multi30k model comes back as $OUT/m30k.tgz.part-* (cat them, then tar -xzf, for CPU
# benchmarks of a trained model).
#
# DEADLINE (seconds, default 580) scales every part's limit with it: where the GPU is lent for
# a few minutes that also pay for the machine's start, a shorter call (DEADLINE=300, and a
# timeout of about DEADLINE + 60) leaves time to run it again. The parts' limits fit the
# deadline: the longest of those side by side plus the timed ones in turn
# (tests/test_benchmark_scripts.py). ended.txt in the results says when each part ended.
set -u
T0=$SECONDS
DEADLINE=${DEADLINE:-580}  # seconds from the start
limit() { echo $(($1 * DEADLINE / 580)); }  # a part's limit at the default deadline, scaled
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
R=${RESULTS:-/tmp/gpu-results}  # every log, packed into $OUT as each part ends
mkdir -p "$R"
ended() { echo "$1 ended at $((SECONDS - T0)) s" | tee -a "$R/ended.txt"; }  # also in the results
pack() { tar -C "$R" --exclude="trace_*" -czf "$OUT/results.tar.gz" . 2>/dev/null; }
{ which g++ nvcc; nproc; python3 -c "import sys, torch; print(sys.version, torch.__version__)"; } \
    >"$R/env.txt" 2>&1
export MULTI30K_RUN=/tmp/m30k PYTHONUNBUFFERED=1
G=${GPU_CHECKS:-benchmarks/gpu_checks.sh}
(PART_LIMIT=$(limit 230) $G "$R" tests >"$R/g_tests.out" 2>&1; ended "tests"; pack) &
(PART_LIMIT=$(limit 170) $G "$R" cli >"$R/g_cli.out" 2>&1; ended "cli"; pack) &
(
    PART_LIMIT=$(limit 220) $G "$R" multi30k >"$R/g_multi30k.out" 2>&1
    ended "multi30k"
    if [ -d /tmp/m30k/checkpoints ]; then
        tar -C /tmp/m30k --exclude=trainer.pt --exclude=./data --exclude=.lock -czf /tmp/m30k.tgz . &&
            split -b 15m /tmp/m30k.tgz "$OUT/m30k.tgz.part-"
        cp /tmp/m30k.hyp "$R/" 2>/dev/null
    fi
    pack
) &
# Compiling the `base` step takes minutes: done here once, beside the others, on 4 of the
# CPU's threads, so that the timed compiled profile below finds inductor's caches on disk.
(
    PROFILE_MODELS=ours TORCHINDUCTOR_COMPILE_THREADS=4 PART_LIMIT=$(limit 220) \
        $G /tmp/warm profile-compiled >"$R/g_warm.out" 2>&1
    ended "warm-up compile"
) &
# The loss's and the optimizers' peak GPU memory (per process, so valid beside the others).
(PART_LIMIT=$(limit 200) $G "$R" step-cost >"$R/g_step-cost.out" 2>&1; ended "step-cost"; pack) &
wait
export PROFILE_MODELS=ours
for p in speed:90 profile-compiled:110 decode:90 profile:50; do
    PART_LIMIT=$(limit ${p#*:}) $G "$R" "${p%:*}" >"$R/g_${p%:*}.out" 2>&1
    ended "${p%:*}"
    pack
done
trace=$R/trace_ours_bf16.json.gz
[ -f "$trace" ] && [ "$(stat -c %s "$trace")" -lt 15000000 ] && cp "$trace" "$OUT/"
left=$((DEADLINE - (SECONDS - T0)))
[ $left -gt 30 ] && PART_LIMIT=$left $G "$R" speed-compiled >"$R/g_speed-compiled.out" 2>&1
ended "all"
pack
grep -h "== .*exit" "$R"/g_*.out
