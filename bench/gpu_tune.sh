#!/usr/bin/env bash
# One GPU lease, the tuner measured: kiln's matmul kernels on the analytic model's tiles, then
# `kiln tune` on each problem, then again on the tuned tiles (bench/RESULTS.md, 2026-11-26, "kiln
# tune on an H200"). The square sizes in every mode, and real layers' projections in bf16 and tf32;
# then bench/gpu_attention's cases likewise (every mode, head dims 64 and 128, S = 1024 and 4096,
# 16 heads): on the model's attention tiles, `kiln tune` on each, and on the tuned tiles.
#
# With --held-out it checks the analytic model instead (bench/RESULTS.md, 2026-11-26, "the analytic
# model refitted"): gpu_gemm without the cache (every kernel on the model's tile), then `kiln tune`
# on 14 problems the model was not fitted to; each record times the model's tile among the rest.
#
# Usage: bench/gpu_tune.sh [--bin DIR] [--out DIR] [--held-out] [--part gemm|attention]
#   --bin DIR  kiln, gpu_gemm, gpu_attention and DIR/lib (scripts/gpu_check.sh --pack DIR);
#              default build/
#   --part P   only the matmuls (gemm) or only the attention cases, for a lease whose commands
#              are limited in time (default: both)
#   --out DIR  where results go (default: $OUT when set, else gpu-tune/): tune.log, tune.jsonl
#              (one `kiln tune --json` object per problem),
#              gpu_gemm-{square,layers}_{before,after}.json, gpu_attention_{before,after}.json
# The cache is a fresh folder of its own ($TMPDIR/kiln-tune-cache-*). Exit 0 when every step ran,
# 1 when one failed (the log says which), 2 on bad usage, 3 without a usable GPU (nothing run).
set -uo pipefail
cd "$(dirname "$0")/.."
bin="" out="${OUT:-gpu-tune}" held_out=0 part=both
while [[ $# -gt 0 ]]; do
  case "$1" in
    --held-out) held_out=1; shift ;;
    --bin) bin="${2:?--bin needs a folder}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --part)
      part="${2:?--part needs gemm or attention}"
      [[ $part == gemm || $part == attention ]] ||
        { echo "gpu_tune: --part takes gemm or attention, not '$part'" >&2; exit 2; }
      shift 2 ;;
    *) echo "gpu_tune: unknown argument '$1'" \
         "(expected --bin DIR, --out DIR, --held-out or --part P)" >&2
       exit 2 ;;
  esac
done
if [[ -n $bin ]]; then
  kiln="$bin/kiln" gemm="$bin/gpu_gemm" attention="$bin/gpu_attention"
  export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  kiln=build/tools/kiln gemm=build/bench/gpu_gemm attention=build/bench/gpu_attention
fi
probe=$("$gemm" --sizes 16 --iterations 1 2>&1)
if [[ $? != 0 ]] || grep -q "skipped:" <<<"$probe"; then
  echo "gpu_tune: no usable GPU, nothing run: ${probe#*skipped: }" >&2
  exit 3
fi
mkdir -p "$out"
export KILN_CACHE_DIR
KILN_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kiln-tune-cache-XXXXXX")
graphs=$(mktemp -d "${TMPDIR:-/tmp}/kiln-tune-graphs-XXXXXX")
trap 'rm -rf "$KILN_CACHE_DIR" "$graphs"' EXIT
log="$out/tune.log" jl="$out/tune.jsonl"
: >"$log"
: >"$jl"
failed=0
t0=$(date +%s)
stamp() { echo "== $(($(date +%s) - t0)) s: $*" | tee -a "$log"; }
# A one-matmul graph: DTYPE M N K -> its path.
graph() {
  local f="$graphs/g_$1_$2x$3x$4.kg"
  printf 'graph gemm {\n  input a: %s[%d, %d]\n  input b: %s[%d, %d]\n  c = matmul(a, b)\n  output c\n}\n' \
    "$1" "$2" "$4" "$1" "$4" "$3" >"$f"
  echo "$f"
}
tune() {  # DTYPE PRECISION M N K
  echo "-- tune $*" >>"$log"
  timeout 120 "$kiln" tune "$(graph "$1" "$3" "$4" "$5")" --precision "$2" --json >>"$jl" 2>>"$log" ||
    { echo "tune $* failed" | tee -a "$log"; failed=1; }
}
gemm() {  # NAME ARGS...
  local name=$1
  shift
  timeout 300 "$gemm" --cache --json "$out/gpu_gemm-$name.json" "$@" >>"$log" 2>&1 ||
    { echo "gpu_gemm $name failed" | tee -a "$log"; failed=1; }
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log"
if [[ $held_out == 1 ]]; then
  stamp "squares and layers on the model's tiles, no cache"
  timeout 300 "$gemm" --json "$out/gpu_gemm-square_model.json" >>"$log" 2>&1 || failed=1
  timeout 300 "$gemm" --sizes "" --layers --modes bf16,high --json "$out/gpu_gemm-layers_model.json" \
    >>"$log" 2>&1 || failed=1
  stamp "tuning the held-out problems"
  for s in "3072 3072 3072" "8192 8192 8192" "512 4096 4096" "256 11008 4096" "4096 4096 11008" \
           "64 4096 14336" "32 8192 8192"; do
    tune bf16 auto $s
  done
  tune f16 auto 2000 2000 2000
  for s in "3072 3072 3072" "512 4096 4096" "64 11008 4096" "4096 4096 11008"; do
    tune f32 high $s
  done
  tune f32 medium 2048 2048 2048
  tune f32 tf32x3 2000 2000 2000
  stamp done
  exit $failed
fi
if [[ $part != attention ]]; then
stamp "squares on the model's tiles"
gemm square_before
stamp "tuning the squares"
for n in 4096 1000; do
  for p in highest high tf32x3 medium; do tune f32 "$p" $n $n $n; done
  tune bf16 auto $n $n $n
  tune f16 auto $n $n $n
done
stamp "squares on the tuned tiles"
gemm square_after
stamp "layers on the model's tiles"
gemm layers_before --sizes "" --layers --modes bf16,high
stamp "tuning the layers"
for n in 4096 11008 14336; do
  for t in 1 16 128 2048; do
    tune bf16 auto $t $n 4096
    tune f32 high $t $n 4096
  done
done
stamp "layers on the tuned tiles"
gemm layers_after --sizes "" --layers --modes bf16,high
fi
# gpu_attention's own graph: DTYPE S D -> the file (16 heads, as gpu_attention's default).
attention_graph() {
  local f="$graphs/att_$1_$2_$3.kg" shape="$1[16, $2, $3]"
  printf 'graph att {\n  input q: %s\n  input k: %s\n  input v: %s\n' "$shape" "$shape" "$shape" >"$f"
  printf '  o = attention(q, k, v)\n  output o\n}\n' >>"$f"
  echo "$f"
}
attention_run() {  # NAME
  timeout 600 "$attention" --cache --json "$out/gpu_attention_$1.json" >>"$log" 2>&1 ||
    { echo "gpu_attention $1 failed" | tee -a "$log"; failed=1; }
}
if [[ $part != gemm ]]; then
stamp "attention on the model's tiles"
attention_run before
stamp "tuning attention"
for d in 64 128; do
  for s in 1024 4096; do
    for mode in f32:highest f32:high f32:tf32x3 f32:medium bf16:auto f16:auto; do
      t=${mode%%:*} p=${mode#*:}
      echo "-- tune attention $t $p $s $d" >>"$log"
      timeout 300 "$kiln" tune "$(attention_graph "$t" "$s" "$d")" --precision "$p" --json \
        >>"$jl" 2>>"$log" || { echo "tune attention $t $p $s $d failed" | tee -a "$log"; failed=1; }
    done
  done
done
stamp "attention on the tuned tiles"
attention_run after
fi
stamp done
exit $failed
