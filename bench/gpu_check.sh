#!/usr/bin/env bash
# GPU check for marl: the learner bench on every visible GPU over NCCL (bf16, then fp32 for
# comparison), then real end-to-end training runs, and VMAS stepped on the actors' GPU beside their
# policy (where vmas is installed), with a short summary. Exits non-zero on any failure. Sized to
# take a few minutes on one H200.
#
#   bash bench/gpu_check.sh                 # a machine with NVIDIA GPUs (respects CUDA_VISIBLE_DEVICES)
#   bash bench/gpu_check.sh --allow-cpu     # no GPU: the same steps on CPU with gloo at tiny sizes, bf16 bench only (CI smoke)
#
# PYTHON picks the interpreter (default: python3, e.g. an activated virtualenv's).
#
# A GPU image with torch, numpy, tensorboard and pytest but without Gymnasium or VMAS takes those as
# pure-Python wheels (2.6 MB), made where pip can fetch: `python3 -m pip wheel --no-deps -w .whl
# gymnasium==1.4.0 farama-notifications vmas==1.5.2 gym==0.26.2 gym-notices==0.0.8 pyglet==1.5.27`,
# then there: `python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
# PYTHONPATH=/tmp/site bash bench/gpu_check.sh`.
set -euo pipefail

usage() {
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

ALLOW_CPU=0
for arg in "$@"; do
    case "$arg" in
        --allow-cpu) ALLOW_CPU=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # marl and envs from this checkout, installed or not
WORK="$(mktemp -d "${TMPDIR:-/tmp}/marl_gpu_check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS

section() { printf '\n=== %s\n' "$*"; }
die() { printf '\ngpu_check: FAIL: %s\n' "$*" >&2; exit 1; }
# Run "$@" with a time limit where coreutils' timeout exists: a hung collective must not eat the lease.
limit() {
    local seconds=$1; shift
    if command -v timeout >/dev/null 2>&1; then
        timeout --kill-after=15 "$seconds" "$@"
    else
        "$@"
    fi
}

command -v "$PYTHON" >/dev/null 2>&1 || die "no Python interpreter '$PYTHON' on PATH; set PYTHON=/path/to/python"

section "GPUs: nvidia-smi -L"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L || echo "(nvidia-smi -L failed with exit code $?)"
else
    echo "(nvidia-smi not found)"
fi
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"

section "versions"
set +e
"$PYTHON" - >"$WORK/versions" 2>&1 <<'EOF'
import platform, sys
missing = []
for name in ("torch", "gymnasium", "numpy", "tensorboard"):
    try:
        __import__(name)
    except ImportError as e:
        missing.append(f"{name} ({e})")
print(f"python {platform.python_version()} at {sys.executable}")
if "torch" not in " ".join(missing):
    import torch
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "n/a (no CUDA)"
    except Exception as e:  # CPU builds have no NCCL
        nccl = f"n/a ({type(e).__name__})"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {nccl}")
    print(f"torch.cuda.is_available() = {torch.cuda.is_available()}, visible GPUs: {torch.cuda.device_count()}")
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, compute capability {p.major}.{p.minor}")
    import gymnasium
    print(f"gymnasium {gymnasium.__version__}")
if missing:
    print("missing Python packages: " + ", ".join(missing))
    sys.exit(3)
print(f"gpus={torch.cuda.device_count() if torch.cuda.is_available() else 0}")
EOF
rc=$?
set -e
sed '/^gpus=/d' "$WORK/versions"
[[ $rc -eq 0 ]] || die "the Python environment is not usable (exit code $rc, above); marl needs torch, gymnasium, numpy and tensorboard"
NGPU="$(sed -n 's/^gpus=//p' "$WORK/versions")"

if [[ "$NGPU" -gt 0 ]]; then
    MODE=gpu
    NPROC=$NGPU
    BACKEND=nccl
    BENCH_ARGS=(--hidden 1024,1024,1024 --batch 65536 --updates 10)
    TRAIN_STEPS=200000
    BENCH_LIMIT=90   # typical: well under a minute each on one H200
    TRAIN_LIMIT=150
    OFF_STEPS=(10000 3000)  # DQN CartPole, SAC Pendulum: replay, targets and every phase's optimizer on the GPU
    OFF_STARTS=200
    PRECISIONS=(bf16 fp32)
    VMAS_COPIES=1024 VMAS_SPEED=(--envs-per-actor 4096 --requests 5 --one-process-seconds 5)
elif [[ $ALLOW_CPU -eq 1 ]]; then
    MODE=cpu
    NPROC=2
    BACKEND=gloo
    BENCH_ARGS=(--hidden 64,64 --batch 1024 --updates 2)
    TRAIN_STEPS=8192  # one iteration of 8,192 agent-steps
    BENCH_LIMIT=120
    TRAIN_LIMIT=150
    OFF_STEPS=(300 150)
    OFF_STARTS=100
    # The CI smoke runs each step of the script once: fp32's bench is bf16's with another flag, and
    # on CPU the bf16/fp32 ratio means nothing.
    PRECISIONS=(bf16)
    VMAS_COPIES=8 VMAS_SPEED=(--envs-per-actor 64 --num-steps 20 --requests 2 --one-process-seconds 1)
    echo "no usable GPU: --allow-cpu given, running the same steps on CPU with gloo at tiny sizes"
else
    die "torch.cuda.is_available() is False: this machine has no usable NVIDIA GPU (or this torch has no CUDA, or CUDA_VISIBLE_DEVICES hides them all); pass --allow-cpu to smoke-test on CPU"
fi

declare -A RESULT
bench() {
    local precision=$1 log="$WORK/learner_$1.log" rc
    section "learner bench: $precision, $NPROC rank(s) under torchrun"
    set +e
    OMP_NUM_THREADS=1 limit "$BENCH_LIMIT" "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
        bench/gpu_learner.py --precision "$precision" "${BENCH_ARGS[@]}" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    [[ $rc -eq 0 ]] || die "bench/gpu_learner.py --precision $precision exited with code $rc$([[ $rc -eq 124 ]] && echo " (timed out after ${BENCH_LIMIT}s)")"
    local line
    line="$(grep '^gpu_learner-result:' "$log" | tail -n 1)" || die "bench/gpu_learner.py --precision $precision printed no result line"
    [[ "$line" == *" backend=$BACKEND "* ]] || die "bench/gpu_learner.py ran with the wrong backend (wanted $BACKEND): $line"
    [[ "$line" == *" world=$NPROC "* ]] || die "bench/gpu_learner.py ran on the wrong world size (wanted $NPROC): $line"
    RESULT[$precision]="$line"
}
field() {  # field NAME LINE
    sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"
}

for p in "${PRECISIONS[@]}"; do bench "$p"; done

# train.py's batch per iteration is num-steps (64) x envs-per-actor (4) x agents (8) x actors (4)
# = 8,192 agent-steps, and must split into learners x num-minibatches (4) equal parts. With a GPU
# count that does not divide it (3, 5, 6, 7), lengthen the rollout a little so that every GPU is used.
LEARNERS=$([[ $MODE == gpu ]] && echo "$NGPU" || echo 1)
NUM_STEPS=64
while (( NUM_STEPS * 4 * 8 * 4 % (LEARNERS * 4) != 0 )); do
    NUM_STEPS=$((NUM_STEPS + 1))
done
TRAIN_EXTRA=()
if [[ $NUM_STEPS -ne 64 ]]; then
    TRAIN_EXTRA=(--num-steps "$NUM_STEPS")
    echo "note: --num-steps $NUM_STEPS (not 64) so that the batch splits over $LEARNERS learners x 4 minibatches"
fi

declare -A FINAL
train_run() {  # train_run NAME ARGS...: train.py with ARGS, its last line kept in FINAL[NAME]
    local name=$1 rc; shift
    local cmd=("$PYTHON" train.py "$@" --precision bf16 --learners "$LEARNERS" --logdir "$WORK/runs" --run-name "$name")
    echo "+ ${cmd[*]}"
    set +e
    limit "$TRAIN_LIMIT" "${cmd[@]}" 2>&1 | tee "$WORK/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    [[ $rc -eq 0 ]] || die "train.py ($name) exited with code $rc$([[ $rc -eq 124 ]] && echo " (timed out after ${TRAIN_LIMIT}s)")"
    FINAL[$name]="$(grep -E '^(solved:|step budget)' "$WORK/$name.log" | tail -n 1)" \
        || die "train.py ($name) exited 0 but printed neither 'solved:' nor 'step budget'"
    grep -qF "| $LEARNERS learner(s) |" "$WORK/$name.log" || die "train.py ($name) did not report $LEARNERS learner(s) in its header"
}

section "end to end: train.py on $LEARNERS learner(s), $MODE"
train_run ppo --agents 8 --actors 4 --total-steps "$TRAIN_STEPS" ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"}

# Off-policy: the replay shard, the target networks and one optimizer per phase live on the learner's
# device, a path the PPO run above never takes.
off_policy() {  # off_policy NAME STEPS ARGS...
    local name=$1 steps=$2; shift 2
    section "off-policy end to end: $name, $LEARNERS learner(s), $MODE"
    train_run "$name" "$@" --total-steps "$steps" --learning-starts "$OFF_STARTS"
}
off_policy dqn "${OFF_STEPS[0]}" --config configs/cartpole_dqn.toml
off_policy sac "${OFF_STEPS[1]}" --config configs/pendulum_sac.toml
OFF_NAMES=(dqn sac)
if [[ $MODE == gpu ]]; then  # the mixer fed the env's state, too (kept out of the CPU smoke for CI's time)
    off_policy qmix 4000 --config configs/coop_nav_qmix.toml
    OFF_NAMES+=(qmix)
fi

# VMAS (issue 26's GPU half): an actor's batched env and its policy on the actor's device (a GPU
# here), the rollout back on the CPU for RPC; the collection speed against one process on that
# device; MAPPO end to end. vmas is an extra (`.[vmas]`): where it is missing the summary says so.
VMAS_LINES=()
if "$PYTHON" -c "import vmas" >/dev/null 2>&1; then
    section "VMAS: an actor's env and policy on its device ($MODE)"
    # tests/test_vmas.py's own check of the actor (env, policy and recorder on its device, the rollout
    # on the CPU, the autoreset step invalid): its GPU test on a GPU machine, its CPU one in the smoke;
    # either must pass, not skip (pytest is in the GPU image).
    WANT=$([[ $MODE == gpu ]] && echo cuda || echo cpu)
    TEST=$([[ $MODE == gpu ]] && echo on_a_gpu_machine_the_actor_puts_vmas || echo an_actor_steps_vmas_as_tensors)
    set +e
    limit 120 "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_vmas.py -k "$TEST" 2>&1 | tee "$WORK/vmas_device.log"
    rc=${PIPESTATUS[0]}
    set -e
    [[ $rc -eq 0 ]] && grep -q "^1 passed" "$WORK/vmas_device.log" \
        || die "tests/test_vmas.py -k $TEST did not pass (above): VMAS did not step on the actor's device"
    VMAS_LINES+=("VMAS on the actor: env, policy and recorder on $WANT, the rollout on the CPU")

    section "VMAS collection: marl's actor against one process on the same device ($MODE)"
    set +e
    limit 180 "$PYTHON" bench/vmas_speed.py "${VMAS_SPEED[@]}" 2>&1 | tee "$WORK/vmas_speed.log"
    rc=${PIPESTATUS[0]}
    set -e
    [[ $rc -eq 0 ]] || die "bench/vmas_speed.py exited with code $rc"
    VMAS_LINES+=("VMAS speed: $(grep -E '^ratio' "$WORK/vmas_speed.log" | tail -n 1) | $(head -n 1 "$WORK/vmas_speed.log")")

    # Two actors' batch (num-steps 50 x copies x 3 agents x 2) must split into learners x 8 minibatches.
    VMAS_ENVS=$VMAS_COPIES
    while (( 50 * VMAS_ENVS * 3 * 2 % (LEARNERS * 8) != 0 )); do VMAS_ENVS=$((VMAS_ENVS + 1)); done
    section "VMAS end to end: MAPPO on navigation, $LEARNERS learner(s), $MODE"
    train_run vmas --env vmas:navigation --env-kwargs '{"n_agents": 3, "max_steps": 50}' --critic central \
        --learning-rate 5e-4 --actors 2 --envs-per-actor "$VMAS_ENVS" --num-steps 50 --total-steps $((50 * VMAS_ENVS * 3 * 2 * 2))
    VMAS_LINES+=("train.py vmas: ${FINAL[vmas]}")
else
    VMAS_LINES+=("VMAS: SKIPPED, vmas is not installed here (pip install vmas==1.5.2; without pip access, the wheels this script's header names)")
fi

section "summary ($MODE, $NPROC rank(s), $((SECONDS - START))s in all)"
for p in "${PRECISIONS[@]}"; do
    line=${RESULT[$p]}
    printf 'learner %s: %12s samples x epochs/s, %10s samples/s, %8s ms/update, gather %s ms, ~%s TFLOP/s, peak %s GiB (%s params, %s)\n' \
        "$p" "$(field samples_epochs_per_s "$line")" "$(field samples_per_s "$line")" "$(field update_ms "$line")" \
        "$(field gather_ms "$line")" "$(field tflops "$line")" "$(field peak_mem_gib "$line")" "$(field params "$line")" \
        "$(field device "$line")"
done
if [[ -n "${RESULT[fp32]-}" ]]; then
    awk -v a="$(field samples_epochs_per_s "${RESULT[bf16]}")" -v b="$(field samples_epochs_per_s "${RESULT[fp32]}")" \
        'BEGIN { if (b > 0) printf "bf16 / fp32 learner throughput: %.2fx\n", a / b }'
fi
for name in ppo "${OFF_NAMES[@]}"; do echo "train.py $name: ${FINAL[$name]}"; done
for line in "${VMAS_LINES[@]}"; do echo "$line"; done
echo "gpu_check: PASS"
