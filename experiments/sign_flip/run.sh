#!/usr/bin/env bash
# The third edition's runs, in pieces (HYPOTHESES.md). Every piece resumes: finished runs are
# skipped, killed ones continue from their last checkpoint. Run it from a checkout left alone:
#   git worktree add ../tvu-sign-flip && cd ../tvu-sign-flip && (README set-up)
#   bash experiments/sign_flip/run.sh lr v1024        # 1. the lr check of a point (seed 0)
#   python experiments/sign_flip/choose_lr.py results/sign_flip --grid 1e-3,2e-3,4e-3
#   bash experiments/sign_flip/run.sh lr-edge         # 2. x2 beyond each edge choice; rerun 1's script
#   (commit lr_choice.tsv)
#   bash experiments/sign_flip/run.sh grid v1024      # 3. seeds 1-3 of both arms at their lr
#   bash experiments/sign_flip/run.sh clip v1024      # 3b. an arm whose clip bound on > 10% of
#                                                     #     steps: seeds 0-3 at grad_clip 4.0
#   bash experiments/sign_flip/run.sh ends            # 4. the ends' arms (tied_in_grad, t5 pair)
#   bash experiments/sign_flip/run.sh init02 v1024    # 5. GPT-2's 0.02 pair (lr check + seeds)
#   bash experiments/sign_flip/run.sh mult2d          # each arm's own emb x head multipliers (V = 8192)
#   bash experiments/sign_flip/run.sh mult2d-edge     # x2 beyond an edge of mult2d's best (mult2d.py)
#   bash experiments/sign_flip/run.sh own v1024       # an arm mult2d.py's rule moved, at its own pair
#   bash experiments/sign_flip/run.sh floor           # the noise floor: seed 0 again at 2 threads
#   bash experiments/sign_flip/run.sh rest            # the own multipliers and the ends' arms, a seed a command
#   bash experiments/sign_flip/run.sh precision       # the seed-0 pairs of V = 40,960 and 8,192 again in fp32
# POINT is one of: v1024 v2048 v4096 v8192 v16384 v40960 (micro body, rho moved by V) and
# b64x2 b256x4 b256x8 (V = 8192, rho moved by the body; micro at 8192 is v8192).
# `run.sh all [POINT]` runs pieces 1-3b point by point (and the floor after V = 40,960) in HYPOTHESES.md's priority order (ORDER),
# then the own piece at each of OWN_POINTS.
# On a new machine, first `run.sh restore` (the bundles' finished runs into their sweeps).
set -euo pipefail
cd "$(dirname "$0")/../.."
export TIKTOKEN_CACHE_DIR="${TIKTOKEN_CACHE_DIR:-$PWD/../shared/data/tiktoken}"
export WANDB_MODE="${WANDB_MODE:-offline}" WANDB_SILENT=true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, whatever is installed
HERE=experiments/sign_flip
RUN="python -m tiedvsuntied.run -m +experiment=sign_flip"
LOG=results/sign_flip.log
BUDGET_BYTES=10000000  # of training text per run, at every point (HYPOTHESES.md, the pilot)
TOKENS_PER_STEP=2048   # 8 windows of 256
LRS="1e-3,2e-3,4e-3"

# point -> "model V bytes-per-token": fold 0's training split (python -m tiedvsuntied.data
# gutenberg encoding=bpe vocab_size=V); the steps follow from the budget
point() {
  case $1 in
    v1024) echo "micro 1024 2.5456" ;;
    v2048) echo "micro 2048 2.9437" ;;
    v4096) echo "micro 4096 3.3047" ;;
    v8192) echo "micro 8192 3.6258" ;;
    v16384) echo "micro 16384 3.8908" ;;
    v40960) echo "micro 40960 4.1324" ;;
    b64x2) echo "body64x2 8192 3.6258" ;;
    b256x4) echo "body256x4 8192 3.6258" ;;
    b256x8) echo "body256x8 8192 3.6258" ;;
    b384x6) echo "body384x6 8192 3.6258" ;;  # on a GPU: scripts/gpu/slot.sh's piece c
    b512x8) echo "body512x8 8192 3.6258" ;;
    b768x12) echo "body768x12 8192 3.6258" ;;
    *) echo "unknown point '$1': v1024 v2048 v4096 v8192 v16384 v40960 b64x2 b256x4 b256x8 b384x6 b512x8 b768x12" >&2; exit 2 ;;
  esac
}
# the overrides of a point: its body and V, and the steps that read BUDGET_BYTES of text,
# evaluated 10 times along the way (the token axis)
at() {
  read -r model v bpt <<< "$(point "$1")"
  steps=$(awk -v b="$BUDGET_BYTES" -v t="$TOKENS_PER_STEP" -v r="$bpt" 'BEGIN {printf "%d", b / (t * r) + 0.5}')
  echo "model=$model data.vocab_size=$v trainer.max_steps=$steps trainer.eval_interval=$(( (steps + 9) / 10 )) trainer.ckpt_interval=200"
}
parallel2() { mkdir -p results; xargs -P 2 -I{} -d '\n' bash -c "{} >> $LOG 2>&1"; }
serial() { mkdir -p results; xargs -P 1 -I{} -d '\n' bash -c "{} >> $LOG 2>&1"; }  # 2-thread runs
# lr_choice.tsv as lines "model V arm init_std lr run_next"
choices() {
  awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    {print $c["model"], $c["vocab_size"], $c["arm"], $c["init_std"], $c["lr"], $c["run_next"]}' "$HERE/lr_choice.tsv"
}
# the arms whose clip bound on more than 10% of their seeds' steps: "model V arm init_std lr"
clip_reruns() {
  awk -F'\t' 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
    $c["clip_rerun"] == "True" {print $c["model"], $c["vocab_size"], $c["arm"], $c["init_std"], $c["lr"]}' "$HERE/lr_choice.tsv"
}
point_of() {  # model V -> point name
  case "$1 $2" in micro\ *) echo "v$2" ;; body64x2\ *) echo b64x2 ;; body256x4\ *) echo b256x4 ;; body256x8\ *) echo b256x8 ;; esac
}

pieces_lr() { for a in tied untied; do echo "$RUN $(at "$1") seed=0 +arm=$a optim.lr=$LRS"; done; }
pieces_lr_edge() {
  choices | while read -r model v a std lr next; do
    [ -n "$next" ] || continue
    echo "$RUN $(at "$(point_of "$model" "$v")") seed=0 +arm=$a init_std=$std optim.lr=$next"
  done
}
pieces_grid() {  # $1: point; both arms at their chosen lr, seeds 1-3
  read -r model v _ <<< "$(point "$1")"
  choices | awk -v m="$model" -v v="$v" '$1 == m && $2 == v && $4 == "inv_sqrt_d"' |
    while read -r _ _ a std lr _; do
      echo "$RUN $(at "$1") seed=1,2,3 +arm=$a optim.lr=$lr"
    done
}
pieces_clip() {  # $1: point; an arm whose clip bound on > 10% of steps, again with it raised x2
  read -r model v _ <<< "$(point "$1")"
  clip_reruns | awk -v m="$model" -v v="$v" '$1 == m && $2 == v' | while read -r _ _ a std lr; do
    for seeds in 0,1 2,3; do  # two commands, so that parallel2 keeps both cores busy
      echo "$RUN $(at "$1") sweep=sign_flip_clip seed=$seeds +arm=$a init_std=$std optim.lr=$lr optim.grad_clip=4.0"
    done
  done
}
pieces_precision() {  # the seed-0 pairs of V = 40,960 and 8,192 in fp32: what precision moves
  # (trainer.precision=auto trains fp32 on a CPU without bf16 units; the study's runs are bf16)
  for p in v40960 v8192; do
    pieces_grid "$p" | sed 's/seed=1,2,3/seed=0 sweep=sign_flip_fp32 trainer.precision=fp32/'
  done
}
bf16_here() {  # the study's runs are bf16: auto must resolve to it on this machine
  python -c "import torch; from tiedvsuntied.train.hardware import resolve_precision as r
from tiedvsuntied.train.config import Precision as P
raise SystemExit(r(P.auto, torch.device('cpu')) != P.bf16)" || {
    echo "run.sh: this CPU has no bf16 units, so trainer.precision=auto would train fp32 here and the study's runs are bf16: run it on a CPU with AMX or AVX512-BF16 (run.sh precision measures what fp32 moves)" >&2
    exit 2
  }
}
pieces_ends() {  # the two ends of the V-ladder: the remedy and the init-1.0 pair, at tied's lr
  for p in v1024 v40960; do
    read -r model v _ <<< "$(point "$p")"
    lr=$(choices | awk -v m="$model" -v v="$v" '$1 == m && $2 == v && $3 == "tied" && $4 == "inv_sqrt_d" {print $5}')
    echo "$RUN $(at "$p") seed=0,1,2,3 +arm=tied_in_grad optim.lr=${lr:?run the lr check of $p first}"
    # init_std on the command line: the experiment's sweep params put +arm before +experiment,
    # whose init_std (d^-0.5) would win over the arm's 1.0 (test_run_sh checks every arm's keys)
    echo "$RUN $(at "$p") seed=0,1,2,3 +arm=t5,emb1_head_dsqrt init_std=1.0 optim.lr=$lr"
  done
}
pieces_mult2d() {  # at V = 8192, micro, each arm at its lr: untied's emb_lr_mult x head_lr_mult in {1, 4, 16}^2, tied's tied_lr_mult
  lr=$(choices | awk '$1 == "micro" && $2 == 8192 && $3 == "untied" && $4 == "inv_sqrt_d" {print $5}')
  # a sweep of its own (choose_lr.py reads the lr check alone); (4, 4), the shared multiplier, is
  # the lr check's own run at that lr
  echo "$RUN $(at v8192) sweep=sign_flip_mult2d seed=0 +arm=untied optim.lr=${lr:?run the lr check of v8192 first} optim.emb_lr_mult=1,16 optim.head_lr_mult=1,4,16"
  echo "$RUN $(at v8192) sweep=sign_flip_mult2d seed=0 +arm=untied optim.lr=$lr optim.emb_lr_mult=4 optim.head_lr_mult=1,16"
  # tied's one matrix over the same multipliers at its lr: added once untied's grid put its best
  # at (4, 1), so that tied gets the same chance (mult2d.py reads both)
  lr=$(choices | awk '$1 == "micro" && $2 == 8192 && $3 == "tied" && $4 == "inv_sqrt_d" {print $5}')
  echo "$RUN $(at v8192) sweep=sign_flip_mult2d seed=0 +arm=tied optim.lr=${lr:?run the lr check of v8192 first} optim.tied_lr_mult=1,16"
}
# "arm emb head" lines of mult2d.py (MULT2D_DIRS: the sweeps it reads; the tests: the bundles)
mult2d_says() {
  # shellcheck disable=SC2086
  python "$HERE/mult2d.py" ${MULT2D_DIRS:-results/sign_flip_mult2d results/sign_flip} "$1"
}
mults() {  # arm emb head -> its multiplier overrides (tied: its one matrix's)
  if [ "$1" = tied ]; then echo "optim.tied_lr_mult=$3"; else echo "optim.emb_lr_mult=$2 optim.head_lr_mult=$3"; fi
}
pieces_mult2d_edge() {  # x2 beyond a multiplier of an arm's best pair at an edge (mult2d.py)
  mult2d_says --run-next | while read -r a e h; do
    lr=$(choices | awk -v a="$a" '$1 == "micro" && $2 == 8192 && $3 == a && $4 == "inv_sqrt_d" {print $5}')
    echo "$RUN $(at v8192) sweep=sign_flip_mult2d seed=0 +arm=$a optim.lr=$lr $(mults "$a" "$e" "$h")"
  done
}
pieces_own() {  # $1: point; an arm mult2d.py's rule moved, at its own multipliers: seeds 0-3 at its lr
  read -r model v _ <<< "$(point "$1")"
  mult2d_says --moves | while read -r a e h; do
    lr=$(choices | awk -v m="$model" -v v="$v" -v a="$a" '$1 == m && $2 == v && $3 == a && $4 == "inv_sqrt_d" {print $5}')
    [ -n "$lr" ] || continue  # the point's lr check has not chosen it yet
    echo "$RUN $(at "$1") seed=0,1,2,3 +arm=$a optim.lr=$lr $(mults "$a" "$e" "$h")"
  done
}
pieces_floor() {  # the ends' seed-0 pairs again, at another thread count: the noise floor
  for p in v1024 v40960; do
    pieces_grid "$p" | sed 's/seed=1,2,3/seed=0 replicate=1 trainer.threads=2/'
  done
}
per_seed() {  # a command over seeds a,b,... -> one command per seed (parallel2 then keeps 2 busy)
  awk '{
    if (!match($0, /seed=[0-9]+(,[0-9]+)+/)) { print; next }
    n = split(substr($0, RSTART + 5, RLENGTH - 5), seeds, ",")
    for (i = 1; i <= n; i++) print substr($0, 1, RSTART - 1) "seed=" seeds[i] substr($0, RSTART + RLENGTH)
  }'
}
pieces_rest() {  # what the study has left once every point's seeds ran: the own multipliers, the ends
  # (V = 8,192's own first: its runs are the shortest left; the ends' arms last, as HYPOTHESES.md
  # cuts them before anything else left), each command once
  { pieces_own v8192; for p in $OWN_POINTS; do pieces_own "$p"; done; pieces_ends; } |
    per_seed | awk '!seen[$0]++'
}
pieces_init02() { for a in tied untied; do echo "$RUN $(at "$1") seed=0 +arm=$a init_std=0.02 optim.lr=$LRS"; done; }

ORDER="v1024 v40960 v4096 v16384 v8192 b256x8 b64x2 b256x4 v2048"  # HYPOTHESES.md's priority
EDGE_STEPS=4  # x2 beyond an edge at most this often per point (HYPOTHESES.md: while at an edge)
# where an arm runs at its own multipliers: the V-ladder's two ends and the grid's own point; the
# other six points are cut (README.md, "Limits": over budget, on slower CPUs)
OWN_POINTS="v1024 v8192 v40960"
all() {  # per point: the lr check, x2 beyond an edge while its best sits there, the seeds
  for p in ${1:-$ORDER}; do
    pieces_lr "$p" | parallel2
    for _ in $(seq "$EDGE_STEPS"); do  # a step with no edge named runs nothing
      python "$HERE/choose_lr.py" results/sign_flip --grid "$LRS" > /dev/null
      pieces_lr_edge | parallel2
    done
    python "$HERE/choose_lr.py" results/sign_flip --grid "$LRS"
    if [ "$p" = v8192 ]; then  # each arm's own multipliers (HYPOTHESES.md), x2 beyond an edge
      pieces_mult2d | parallel2
      for _ in 1 2; do pieces_mult2d_edge | parallel2; done
    fi
    pieces_grid "$p" | parallel2
    python "$HERE/choose_lr.py" results/sign_flip --grid "$LRS" > /dev/null
    pieces_clip "$p" | parallel2  # HYPOTHESES.md: an arm whose clip binds on > 10% of steps
    # the noise floor, once both ends have their lr: every later effect is read against it
    [ "$p" != v40960 ] || pieces_floor | serial
  done
  # HYPOTHESES.md: an arm whose own multipliers won at V = 8192 runs at them at every point too
  # (OWN_POINTS: where the cut left it)
  for p in ${1:-$OWN_POINTS}; do pieces_own "$p" | parallel2; done
}

restore() {  # the shipped bundles' finished runs into their sweeps, where they are not yet
  local pair run sweep
  # bundle -> sweep: without the multiplier grid's runs, `all` would train them again
  for pair in results:sign_flip results_clip:sign_flip_clip results_mult2d:sign_flip_mult2d \
    results_fp32:sign_flip_fp32; do
    sweep="results/${pair#*:}"
    mkdir -p "$sweep"
    for run in "$HERE/${pair%%:*}"/*/; do
      [ -d "$run" ] || continue
      [ -e "$sweep/$(basename "$run")" ] || cp -r "$run" "$sweep/"
    done
  done
}

case "${1:-}" in
  restore | print | at | precision) ;;
  *) bf16_here ;;
esac
case "${1:-}" in
  restore) restore ;;
  all) all "${2:-}" ;;
  lr) pieces_lr "${2:?point}" | parallel2 ;;
  lr-edge) pieces_lr_edge | parallel2 ;;
  grid) pieces_grid "${2:?point}" | parallel2 ;;
  clip) pieces_clip "${2:?point}" | parallel2 ;;
  ends) pieces_ends | parallel2 ;;
  init02) pieces_init02 "${2:?point}" | parallel2 ;;
  mult2d) pieces_mult2d | parallel2 ;;
  mult2d-edge) pieces_mult2d_edge | parallel2 ;;
  own) pieces_own "${2:?point}" | parallel2 ;;
  rest) pieces_rest | parallel2 ;;
  precision) pieces_precision | parallel2 ;;
  floor) pieces_floor | serial ;;
  print) "pieces_${2//-/_}" "${@:3}" ;;  # the commands of a piece, without running them
  at) at "${2:?point}" ;;
  *) echo "usage: run.sh restore | all [POINT] | lr POINT | lr-edge | grid POINT | clip POINT | ends | init02 POINT | mult2d | mult2d-edge | own POINT | rest | floor | precision | print PIECE [POINT] | at POINT" >&2; exit 2 ;;
esac
