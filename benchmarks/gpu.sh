#!/usr/bin/env bash
# Every GPU row of benchmarks/RESULTS.md in one run, for when a CUDA GPU is lent.
#   bash benchmarks/gpu.sh OUT_DIR [STEP...]     (default: every step; COURSE_DATA_DIR must hold
#                                                 tinyshakespeare.txt)
# Steps: flash_attention kv_cache decode_kv_heads sparse_attention lesson10 lesson11. Each has its
# own time limit, writes OUT_DIR/<step>.txt, and a failure does not stop the steps after it.
# lesson10/lesson11 run the solution notebooks as scripts (tools/run_as_script.py) on the GPU.
# Run from the repository root; course_lib is imported from here.
set -u
out=${1:?usage: bash benchmarks/gpu.sh OUT_DIR [STEP...]}
shift
steps=${*:-flash_attention kv_cache decode_kv_heads sparse_attention lesson10 lesson11}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit} s): $*" | tee "$out/$name.txt"
    timeout "$limit" "$@" >>"$out/$name.txt" 2>&1
    echo "== $name: exit $?, $((SECONDS - t0)) s" | tee -a "$out/$name.txt"
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $py -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  nproc; } >"$out/env.txt" 2>&1
for s in $steps; do
    case $s in
        flash_attention) step $s 90 $py benchmarks/flash_attention.py --skip-cpu ;;
        kv_cache) step $s 90 $py benchmarks/kv_cache.py --device cuda ;;
        decode_kv_heads) step $s 90 $py benchmarks/decode_kv_heads.py --device cuda --context 8192 ;;
        sparse_attention) step $s 90 $py benchmarks/sparse_attention.py --skip-cpu --settle 0.2 ;;
        lesson10) step $s 240 $py tools/run_as_script.py solutions/10_your_gpt/10_your_gpt.ipynb ;;
        lesson11) step $s 120 $py tools/run_as_script.py solutions/11_flash_attention/11_flash_attention.ipynb ;;
        *) echo "unknown step $s" >&2; exit 2 ;;
    esac
done
