# Sourced by scripts/gpu/*.sh: the GPU machine as this project needs it. That machine's python3
# has torch, tiktoken, pandas, scipy, matplotlib and pytest, but no hydra-core, omegaconf or
# antlr4 (carried as wheels in .whl/, README "On a GPU"), no wandb or datasets (W&B is disabled;
# the books are local text), and no ../shared (carried as .gpu/shared.tar.xz). scripts/gpu/pack.sh
# makes .whl/ and .gpu/ here first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PY:-python3}
if [ -d .whl ]; then
  [ -d /tmp/site/hydra ] || $PY -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -d ../shared/data/gutenberg ] && [ -f .gpu/shared.tar.xz ]; then
  mkdir -p ../shared/data && tar -xJf .gpu/shared.tar.xz -C ../shared/data
fi
export TIKTOKEN_CACHE_DIR="$PWD/../shared/data/tiktoken" WANDB_MODE=disabled PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
mult() {  # the emb_lr_mult the second edition chose for arm $1 at init_std $2 (at nano)
  $PY -m tiedvsuntied.study.fair chosen tie_x_init_books "$1" "$2"
}
