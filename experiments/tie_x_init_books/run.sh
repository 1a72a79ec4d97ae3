#!/usr/bin/env bash
# The second edition's runs, in pieces (HYPOTHESES.md). Every piece resumes: finished runs are
# skipped, killed ones continue from their last checkpoint. Run it from a checkout left alone:
#   git worktree add ../tvu-study && cd ../tvu-study && python -m venv .venv ... (README set-up)
#   bash experiments/tie_x_init_books/run.sh lr        # 1. the lr check (24 nano runs, into the study's sweep)
#   python experiments/tie_x_init_books/choose_lr.py results/tie_x_init_books
#   bash experiments/tie_x_init_books/run.sh lr-edge   # 2. the next multiplier out, where needed
#   (commit lr_choice.tsv)
#   bash experiments/tie_x_init_books/run.sh primary   # 3. the primary contrast's 10 runs first
#   bash experiments/tie_x_init_books/run.sh grid nano # 4. 8 arms x 5 seeds at each size
#   bash experiments/tie_x_init_books/run.sh grid micro
#   bash experiments/tie_x_init_books/run.sh floor     # 5. seed 0 of each cell at 2 threads
# On a new machine, first `run.sh restore`: the bundle's finished runs are copied into results/,
# so every piece skips them (a bundle keeps no checkpoints: unfinished runs start again).
# Each piece is a list of sequential multiruns (one thread each), two at a time on two cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TIKTOKEN_CACHE_DIR="${TIKTOKEN_CACHE_DIR:-$PWD/../shared/data/tiktoken}"
export WANDB_MODE="${WANDB_MODE:-offline}" WANDB_SILENT=true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, whatever is installed
HERE=experiments/tie_x_init_books
RUN="python -m tiedvsuntied.run -m"
PLAIN="+experiment=tie_x_init_books"
ARMS="+experiment=tie_x_init_books_arms"

LOG=results/tie_x_init_books.log  # every command's output; progress: the sweep's index.json
# one line per command; two at a time
parallel2() { mkdir -p results; xargs -P 2 -I{} -d '\n' bash -c "{} >> $LOG 2>&1"; }
# lr_choice.tsv as lines "arm init_std emb_lr_mult run_next", whatever its column order
choices() {
  awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    {print $c["arm"], $c["init_std"], $c["emb_lr_mult"], $c["run_next"]}' "$HERE/lr_choice.tsv"
}
experiment() { case $1 in t5 | emb1_head_dsqrt) echo "$ARMS" ;; *) echo "$PLAIN" ;; esac; }

pieces_lr() {
  for std in 0.02 inv_sqrt_d 1.0; do
    for a in tied untied; do
      echo "$RUN $PLAIN model=nano seed=0 +arm=$a init_std=$std optim.emb_lr_mult=0.25,1,4"
    done
  done
  for a in t5 emb1_head_dsqrt; do
    echo "$RUN $ARMS model=nano seed=0 +arm=$a optim.emb_lr_mult=0.25,1,4"
  done
}

pieces_lr_edge() {
  choices | while read -r a std mult next; do
    [ -n "$next" ] || continue
    echo "$RUN $(experiment "$a") model=nano seed=0 +arm=$a init_std=$std optim.emb_lr_mult=$next"
  done
}

pieces_grid() {  # $1: model; each arm at its chosen multiplier, seeds 0-4
  choices | while read -r a std mult next; do
    echo "$RUN $(experiment "$a") model=$1 seed=0,1,2,3,4 +arm=$a init_std=$std optim.emb_lr_mult=$mult"
  done
}

pieces_primary() {  # tied and untied at init 0.02, micro: what the primary contrast reads
  pieces_grid micro | grep -E '\+arm=(tied|untied) init_std=0.02 '
}

pieces_floor() {
  for m in nano micro; do
    pieces_grid "$m" | sed 's/seed=0,1,2,3,4/seed=0 replicate=1 trainer.threads=2/'
  done
}

restore() {  # the shipped bundle's finished runs into the sweep, where they are not yet
  mkdir -p results/tie_x_init_books
  for run in "$HERE"/results/*/; do
    [ -e "results/tie_x_init_books/$(basename "$run")" ] || cp -r "$run" results/tie_x_init_books/
  done
}

case "${1:-}" in
  restore) restore ;;
  lr) pieces_lr | parallel2 ;;
  lr-edge) pieces_lr_edge | parallel2 ;;
  primary) pieces_primary | parallel2 ;;
  grid) pieces_grid "${2:?model: nano or micro}" | parallel2 ;;
  floor) mkdir -p results; pieces_floor | xargs -I{} -d '\n' bash -c "{} >> $LOG 2>&1" ;;  # 2 threads each: one at a time
  print) "pieces_${2//-/_}" "${@:3}" ;;  # the commands of a piece, without running them
  *) echo "usage: run.sh restore | lr | lr-edge | primary | grid nano|micro | floor | print PIECE [model]" >&2; exit 2 ;;
esac
