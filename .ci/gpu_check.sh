#!/usr/bin/env bash
# The GPU check of docs/gpu.md in one run (about 9 minutes on one GPU), from a checkout that is not
# pip-installed: it is linked as `assocmem` on PYTHONPATH, and the wheels of `make gpu-wheels` (.whl/:
# pydantic, FLA, ...) go to /tmp/site. Four parts, each with a time limit, each writing to $OUT as it goes:
#
#   part     command                                                   limit   writes
#   smoke    assocmem bench smoke --device cuda --backend torch        70 s    smoke.json
#   verify   assocmem verify --device cuda SPEC (one run per spec)     150 s   (gpu_check.log)
#   mixers   assocmem bench backends --device cuda                     200 s   mixers.json, mixers.md
#   models   assocmem bench models --device cuda                       100 s   models.json, models.md
#
# The smoke runs the eager forms (--backend torch): it checks that every preset and hybrid trains a bf16
# step under CUDA's autocast casts, fast; verify and the benches run the fla, compiled and auto backends.
# Every benchmark has an internal budget below its limit (rows past it read 'skipped: budget') and
# rewrites its JSON after each row, so a part cut off by its limit still leaves what it measured.
# gpu_check.log holds all output, summary.txt one line per part (exit status, seconds).
#
#   device tool:   carry [".whl"], command "bash .ci/gpu_check.sh"   ($OUT is set there)
#   here, on CPU:  DEVICE=cpu PYTHON=.venv/bin/python OUT=/tmp/out bash .ci/gpu_check.sh
#                  (the same four parts at tiny sizes, FLA's naive references for its kernels: about a minute)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$ROOT/gpu_check_out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: > "$LOG"
: > "$OUT/summary.txt"
export PYTHONUNBUFFERED=1

if [[ $DEVICE == cuda ]]; then
  if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$ROOT"/.whl/*.whl >> "$LOG" 2>&1 || { echo "installing .whl/*.whl failed (see $LOG)" | tee -a "$OUT/summary.txt"; exit 1; }
    SITE=/tmp/site
  else
    echo "no .whl/*.whl: run 'make gpu-wheels' here and carry .whl" | tee -a "$LOG"
    SITE=
  fi
fi
LINK=$(mktemp -d /tmp/gpu_check_path.XXXXXX)
ln -s "$ROOT" "$LINK/assocmem"
export PYTHONPATH="$LINK${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
# the console script, as `pip install` would make it (timeout runs programs, not shell functions)
mkdir "$LINK/bin"
cat > "$LINK/bin/assocmem" <<SCRIPT
#!/usr/bin/env bash
exec "$PYTHON" -c 'import sys; from assocmem.cli import main; sys.exit(main(sys.argv[1:]))' "\$@"
SCRIPT
# verify-each LIMIT_S PER_SPEC_S FLAGS SPEC...: one verify run per spec (each prints its own table) while
# the part's seconds last, so a spec that takes long costs its own table only
cat > "$LINK/bin/verify-each" <<'SCRIPT'
#!/usr/bin/env bash
limit=$1 per=$2 flags=$3
shift 3
start=$(date +%s) rc=0
for spec in "$@"; do
  if (( $(date +%s) - start + 10 > limit )); then echo "verify: no time left for $spec"; rc=1; continue; fi
  timeout --kill-after=5 "$per" assocmem verify $flags "$spec" || { echo "verify $spec: exit $?"; rc=1; }
done
exit $rc
SCRIPT
chmod +x "$LINK/bin/assocmem" "$LINK/bin/verify-each"
export PATH="$LINK/bin:$PATH"

# part NAME LIMIT_S COMMAND...: run with a time limit, output to the log, one line in summary.txt
part() {
  local name=$1 limit=$2 start rc
  shift 2
  echo "=== $name (limit ${limit} s): $*" | tee -a "$LOG"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  echo "$name: exit $rc$([[ $rc == 124 || $rc == 137 ]] && echo ' (time limit)') in $(( $(date +%s) - start )) s" \
    | tee -a "$OUT/summary.txt" "$LOG"
}

{
  echo "device: $DEVICE  python: $("$PYTHON" --version 2>&1)  root: $ROOT"
  [[ $DEVICE == cuda ]] && nvidia-smi -L
  "$PYTHON" -c 'import torch, importlib.metadata as m
def v(n):
    try: return m.version(n)
    except m.PackageNotFoundError: return None
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), *(f"{n} {v(n)}" for n in ("triton", "fla-core", "flash-linear-attention", "transformers", "pydantic")))
import assocmem; print("assocmem from", assocmem.__file__)'
} 2>&1 | tee -a "$LOG"

if [[ $DEVICE == cuda ]]; then
  part smoke 70 assocmem bench smoke --device cuda --backend torch --budget-s 60 --case-budget-s 20 \
    --json "$OUT/smoke.json" --overwrite
  part verify 150 verify-each 140 45 "--device cuda" gated_deltanet mamba2 gla deltanet kda rwkv7_dplr retnet \
    linear_attention
  part mixers 200 assocmem bench backends --device cuda --budget-s 185 --case-budget-s 40 \
    --json "$OUT/mixers.json" --markdown "$OUT/mixers.md" --overwrite
  part models 100 assocmem bench models --device cuda --budget-s 90 --case-budget-s 45 \
    --json "$OUT/models.json" --markdown "$OUT/models.md" --overwrite
else  # the same parts at tiny sizes on this machine: checks the script and the commands' wiring
  part smoke 60 assocmem bench smoke --device cpu --tiny --presets thesis-tiny-gdn-75 --layers gated_deltanet,attn \
    --seq-len 16 --json "$OUT/smoke.json" --overwrite
  part verify 60 verify-each 50 40 --no-large gated_deltanet
  part mixers 60 assocmem bench backends --device cpu --naive-fla --families gated_deltanet sca --seq-lens 32 \
    --batch 1 --heads 2 --head-dim 16 --repeats 1 --impls fla auto eager transformers sdpa \
    --json "$OUT/mixers.json" --markdown "$OUT/mixers.md" --overwrite
  part models 60 assocmem bench models --device cpu --presets thesis-tiny-gdn-75 --seq-lens 16 --batch 2 \
    --warmup 1 --steps 1 --json "$OUT/models.json" --markdown "$OUT/models.md" --overwrite
fi
rm -rf "$LINK"
echo "=== summary" | tee -a "$LOG"
cat "$OUT/summary.txt"
