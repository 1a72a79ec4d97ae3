#!/usr/bin/env bash
# Run HERE (not on the GPU machine), once: what scripts/gpu/*.sh need on a GPU machine that has
# no network, into git-ignored folders that the device call carries (carry: [".gpu", ".whl"]).
#   .whl/  hydra-core, omegaconf (PyPI wheels) and antlr4-python3-runtime 4.9.3 (built here:
#          PyPI has no wheel of it) for that machine's Python 3.12
#   .gpu/shared.tar.xz  the books, the tiktoken cache and Tiny Shakespeare (../shared/data)
#   .gpu/nanoGPT/model.py  from a karpathy/nanoGPT checkout ($NANOGPT), never vendored
# Together with the tree they must stay under the device's 64 MiB (about 51 MiB in 2026-11).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python}
mkdir -p .whl .gpu/nanoGPT
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 -d .whl hydra-core==1.3.8 omegaconf==2.3.1
$PY -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
[ -f .gpu/shared.tar.xz ] || tar -C ../shared/data -cf - gutenberg tiktoken tinyshakespeare \
  | xz -T0 -6 > .gpu/shared.tar.xz
if [ -n "${NANOGPT:-}" ]; then cp "$NANOGPT/model.py" "$NANOGPT/LICENSE" .gpu/nanoGPT/; fi
du -sh .whl .gpu
