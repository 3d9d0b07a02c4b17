#!/usr/bin/env bash
# Everything this project checks and measures on a CUDA GPU, in one command (about 8 minutes on
# an H100). Run from the repository root on a machine with a GPU and PyTorch with CUDA:
#
#     benchmarks/gpu_checks.sh OUT [PART...]      # PART: tests cli profile speed decode multi30k
#
# tests     pytest -m gpu (training, exact resume in fp32/bf16/fp16, GPU-trained = CPU-translated,
#           compiled = eager, serving on the GPU)
# cli       the command line as a user runs it: short trainings with --device cuda in each
#           precision, a resume, and the GPU-trained model translating on the CPU
# profile   benchmarks/profile_step.py: where the bf16 `base` step's time goes (host and device);
#           profile-compiled: the same compiled (not a default part)
# speed     benchmarks/train_speed.py: ours against nn.Transformer, fp32 and bf16, MFU
# decode    benchmarks/decode_speed.py --device cuda, the compiled step too (runtime.compile)
# step-cost benchmarks/step_cost.py --device cuda: the fused loss's and the optimizers' peak
#           memory against the whole logits' (not a default part)
# translate benchmarks/translate_speed.py --device cuda at OPUS-MT size: ours, and beside it
#           generate and CTranslate2 where they are installed (not a default part)
# multi30k  two minutes of the `multi30k-de-en` config (the `small` preset) on the GPU, bf16,
#           eager (compiling takes minutes of its own), through the real loop, then evaluate on
#           test2016: BLEU per minute (needs the corpus in
#           MULTI30K_DIR, default .gpu/data; the run is kept in MULTI30K_RUN, default a temporary
#           folder)
#
# Each part writes its log to OUT/PART.log; results/*.md files are copied to OUT.
set -uo pipefail
OUT=${1:?usage: benchmarks/gpu_checks.sh OUT [PART...]}
shift
PARTS=${*:-tests cli profile speed decode multi30k}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
python() { "$PY" "$@"; }
RUNS=$(mktemp -d)

part() {  # part NAME SECONDS COMMAND...: runs COMMAND under a time limit (PART_LIMIT overrides it),
    local name=$1 limit=${PART_LIMIT:-$2}  # logs to OUT/NAME.log
    shift 2
    echo "== $name ($(date +%T))"
    local start=$SECONDS
    timeout "$limit" bash -c "$*" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    tail -n 25 "$OUT/$name.log"
}
export -f python
export PY

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

for p in $PARTS; do
    case $p in
    tests)
        part tests 300 python -m pytest -q -p no:cacheprovider -m gpu tests/test_device.py \
            tests/test_serve_process.py tests/test_compiled_decoding.py ;;
    tests-compiled)
        part tests-compiled 300 python -m pytest -q -p no:cacheprovider -m gpu \
            tests/test_device.py -k compiled ;;
    cli)
        part cli 240 "set -e
            for precision in fp32 bf16 fp16; do
                python -m transformer train --out $RUNS/\$precision --config numbers \
                    --device cuda --precision \$precision --max_steps 300 --log_every 100 \
                    --validate_every 300 --save_every 150 --bleu_sentences 50
            done
            python -m transformer train --out $RUNS/bf16 --resume --max_steps 400 --device cuda
            printf 'twelve\nseven hundred and one\nthree thousand and forty-two\n' >$RUNS/in.txt
            python -m transformer translate $RUNS/bf16 --device cpu <$RUNS/in.txt
            python -m transformer translate $RUNS/bf16 --device cuda <$RUNS/in.txt
            python -m transformer translate $RUNS/bf16 --device cuda --sampling true \
                --top_p 0.9 --sampling_seed 1 --nbest 2 <$RUNS/in.txt
            python -m transformer translate $RUNS/bf16 --device cuda --beam_size 4 \
                --alignment true <$RUNS/in.txt" ;;
    profile)
        part profile 240 "cd benchmarks && python profile_step.py --device cuda --preset base \
            --batch 400 --precision bf16 --models ours,nn.Transformer --steps 10 --rounds 3 \
            --trace $RUNS/trace --report $OUT/profile_step_cuda.md && \
            gzip -c $RUNS/trace/trace_ours_bf16.json >$OUT/trace_ours_bf16.json.gz" ;;
    profile-compiled)  # PROFILE_MODELS: ours alone takes half the compiling
        part profile-compiled 300 "cd benchmarks && python profile_step.py --device cuda \
            --preset base --batch 400 --precision bf16 --compile --steps 10 --rounds 3 \
            --models ${PROFILE_MODELS:-ours,nn.Transformer} \
            --report $OUT/profile_step_cuda_compiled.md" ;;
    speed)
        part speed 300 "cd benchmarks && python train_speed.py --device cuda --preset base \
            --batch 400 --steps 20 --rounds 3 --no-compile --report $OUT/train_speed_cuda.md" ;;
    speed-compiled)
        part speed-compiled 420 "cd benchmarks && python train_speed.py --device cuda \
            --preset base --batch 400 --steps 10 --rounds 2 --precisions bf16 \
            --report $OUT/train_speed_cuda_compiled.md" ;;
    step-cost)  # peak memory is per process: valid beside other work, its times are not
        part step-cost 200 "cd benchmarks && python step_cost.py --device cuda --preset base \
            --rounds 2 --report $OUT/step_cost_cuda.md" ;;
    decode)
        part decode 300 "cd benchmarks && python decode_speed.py --device cuda --preset base \
            --vocab 32000 --sentences 256 --batch-size 64 --repeats 2 --compile" ;;
    translate)  # not in the default parts: generate needs transformers, CTranslate2 a CUDA build
        ENGINES=torch
        python -c "import transformers" 2>/dev/null && ENGINES=$ENGINES,marian
        python -c "import ctranslate2, sys; sys.exit(ctranslate2.get_cuda_device_count() == 0)" \
            2>/dev/null && ENGINES=$ENGINES,ct2-float32
        part translate 300 "cd benchmarks && python translate_speed.py --device cuda \
            --size opus-mt --settings fixed --engines $ENGINES --rounds 2 \
            --markdown $OUT/translate_speed_cuda.md" ;;
    multi30k)
        M30K=${MULTI30K_RUN:-$RUNS/m30k}
        part multi30k 240 "python -m transformer train --out $M30K --config multi30k-de-en \
            --data.data_dir ${MULTI30K_DIR:-.gpu/data} --device cuda --precision bf16 \
            --max_minutes 2 --log_every 250 --validate_every 100000 \
            --save_every 100000 && python -m transformer evaluate $M30K --device cuda \
            -o $M30K.hyp ; cp $M30K/metrics.jsonl $OUT/multi30k_metrics.jsonl" ;;
    *) echo "unknown part $p" ;;
    esac
done
