#!/usr/bin/env bash
# GPU calls 2 and 3 (issue 27): the second edition's arms at GPT-2 small
# (conf/experiment/tie_x_init_books_small.yaml), each at the emb_lr_mult chosen at nano.
#   scripts/gpu/small_cells.sh BUDGET_S [SEEDS] [ARMS]
# Seeds outer, arms inner (every arm at seed 0 before any at seed 1), as long as BUDGET_S
# seconds leave room for one more run as long as the last. A run still going at the budget gets
# SIGTERM: it saves a checkpoint and stops, and the next call resumes it while the machine is
# still the same one. The finished runs leave as $OUT/small_runs.tar.gz (no checkpoints),
# for `python -m tiedvsuntied.bundle --no-arrays` here. EXTRA: more overrides for every run (a CPU dry run).
source "$(dirname "$0")/env.sh"
BUDGET=${1:?usage: small_cells.sh BUDGET_S [SEEDS] [ARMS]}
SEEDS=${2:-0,1,2,3,4}
ARMS=${3:-tied:0.02 untied:0.02 tied:inv_sqrt_d untied:inv_sqrt_d tied:1.0 untied:1.0 t5:1.0 emb1_head_dsqrt:1.0}
# Runs a fresh machine has not got: those an earlier call sent back, put in .gpu/ again here.
mkdir -p results
[ ! -f .gpu/small_runs.tar.gz ] || tar -xzf .gpu/small_runs.tar.gz -C results --skip-old-files
last=120  # seconds a run is expected to take until one has been timed
for seed in ${SEEDS//,/ }; do
  for cell in $ARMS; do
    arm=${cell%%:*} std=${cell#*:}
    left=$((BUDGET - $(elapsed)))
    if [ "$left" -lt "$last" ]; then
      echo "budget: ${left} s left, a run takes ~${last} s: stopping before seed $seed $cell"
      break 2
    fi
    t0=$(date +%s)
    echo "=== seed $seed $arm init_std=$std emb_lr_mult=$(mult "$arm" "$std") at $(elapsed) s"
    timeout --signal=TERM --kill-after=60 "$left" $PY -m tiedvsuntied.run \
      +experiment=tie_x_init_books_small "+arm=$arm" "init_std=$std" "seed=$seed" \
      "optim.emb_lr_mult=$(mult "$arm" "$std")" "trainer.device=${DEVICE:-cuda}" ${EXTRA:-} 2>&1 | tee -a "$OUT/small_cells.log" \
      || echo "exit $? (seed $seed $cell)"
    last=$(($(date +%s) - t0))
  done
done
# no checkpoints (0.5-0.6 GB a run) or probe arrays (24-43 MB): a file back is at most 16 MiB
tar -czf "$OUT/small_runs.tar.gz" --exclude=checkpoints --exclude=probes \
  -C results tie_x_init_books_small
echo "small cells done at $(elapsed) s"
