#!/usr/bin/env bash
# GPU call 1 (issue 27): is the CUDA path right (pytest -m cuda), and how fast is it at GPT-2
# small against nanoGPT's model.py (.gpu/nanoGPT, a karpathy/nanoGPT checkout's model.py)?
#   scripts/gpu/check_and_bench.sh [SIZES] [BATCH]     (default: small 32)
# Writes gpu.txt, pytest_cuda.txt and bench_<sizes>.{json,md} to $OUT.
source "$(dirname "$0")/env.sh"
SIZES=${1:-small} BATCH=${2:-32}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit \
  --format=csv | tee "$OUT/gpu.txt" || echo "no nvidia-smi" | tee "$OUT/gpu.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$OUT/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 240 $PY -m pytest -m cuda -p no:cacheprovider tests/e2e/test_cuda.py 2>&1 | tee "$OUT/pytest_cuda.txt" \
    || echo "pytest -m cuda: exit $?" | tee -a "$OUT/pytest_cuda.txt"
fi
echo "tests done at $(elapsed) s"
name=$(echo "$SIZES" | tr , -)
$PY -m tiedvsuntied.bench --device "${DEVICE:-cuda}" --sizes "$SIZES" --batch-size "$BATCH" \
  --variants "${VARIANTS:-baseline,bf16-compiled,bf16-compiled-full,nanogpt}" \
  --nanogpt .gpu/nanoGPT ${BENCH_ARGS:-} --json >"$OUT/bench_$name.json" \
  2> >(tee "$OUT/bench_$name.log" >&2) || echo "bench: exit $?"
$PY scripts/gpu/bench_table.py "$OUT/bench_$name.json" | tee "$OUT/bench_$name.md"
echo "bench done at $(elapsed) s"
