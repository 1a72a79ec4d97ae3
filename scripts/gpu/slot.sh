#!/usr/bin/env bash
# One GPU slot (issue 38; docs/gpu.md "Slots"): the third edition's runs that CPUs cannot reach,
# in priority order, for at most LIMIT_S seconds of this call. Each call
#  1. restores what earlier slots shipped (experiments/sign_flip/results_gpu and results_small,
#     and .gpu/slot_runs.tar.gz: the last call's finished runs, not yet bundled), so nothing
#     trains twice;
#  2. runs the pieces in order, each run a process of its own, several at once where the model
#     is small; it starts no run whose expected time would pass the limit, and a run still going
#     there gets SIGTERM: it checkpoints and stops, and a call on the same machine resumes it;
#  3. after each step of a piece, packs into $OUT: the finished runs without checkpoints or
#     arrays (slot_runs.tar.gz), the bundles (results_gpu/, results_small/), the lr tables, the
#     figures and slot.tsv (each run's wall time and how many ran at once: how many pay).
#   scripts/gpu/slot.sh LIMIT_S [PIECES]        PIECES: "a b c" unless given, in that order
#  a  micro at GPT-2's vocabulary (rho 0.89) in the third edition's set-up and its 10 MB of text:
#     tied and untied at d^-0.5, the lr check 1e-3,2e-3,4e-3 at seed 0 (x2 beyond an edge), then
#     seeds 1-3 at each arm's lr (sweep sign_flip_gpu)
#  b  GPT-2 small in the second edition's set-up (tie_x_init_books_small, 16.4 M tokens): tied
#     and untied at d^-0.5, then at 0.02, each the lr check 3e-4,6e-4,1.2e-3 at seed 0 (x2 beyond
#     an edge) and seeds 1-4 at each arm's lr (sweep sign_flip_small)
#  c  the body ladder (V = 8,192) at bodies a CPU cannot train, d=384x6, 512x8, 768x12 (rho 0.23,
#     0.14, 0.07), in the third edition's set-up, as a (the study's points b384x6 ...; sweep
#     sign_flip_gpu)
# A dry run on CPU (docs/gpu.md): PY=<venv python> DEVICE=cpu EXTRA_A=... EXTRA_B=... slot.sh 600
source "$(dirname "$0")/env.sh"
trap 'echo "slot.sh: line $LINENO: exit $? at $(elapsed) s" >&2' ERR  # no silent stop in a slot
LIMIT=${1:?usage: slot.sh LIMIT_S [PIECES]}
PIECES=${2:-a b c}
JOBS=${JOBS:-6}             # micro runs at once in the lr check (16 cores, one GPU)
JOBS_SEEDS=${JOBS_SEEDS:-3} # and in the seeds: two counts in one call, so slot.tsv shows which pays
DEADLINE=$((START + LIMIT - 60))  # the last minute packs
R=${RESULTS:-results}                       # the sweeps (a test's own folder)
LAST=${RESTORE:-.gpu/slot_runs.tar.gz}      # the last call's runs, fetched back and put here
RUN="$PY -m tiedvsuntied.run -m trainer.device=${DEVICE:-cuda} results_dir=$R"
# steps: 10 MB / (2,048 tokens a step x 3.8001 bytes per GPT-2 token on fold 0's training split,
# python -m tiedvsuntied.data gutenberg encoding=gpt2), as the study's points do
A="+experiment=sign_flip sweep=sign_flip_gpu model=micro data.encoding=gpt2 data.vocab_size=null"
A="$A trainer.max_steps=1285 trainer.eval_interval=129 trainer.ckpt_interval=200 trainer.threads=2"
A="$A ${EXTRA_A:-}"
B="+experiment=tie_x_init_books_small sweep=sign_flip_small model=small ${EXTRA_B:-}"
C="+experiment=sign_flip sweep=sign_flip_gpu trainer.threads=2"  # + a point's overrides
LRS_A=${LRS_A:-1e-3,2e-3,4e-3} LRS_B=${LRS_B:-3e-4,6e-4,1.2e-3}
D_SQRT="tied:inv_sqrt_d untied:inv_sqrt_d"
export DEADLINE RUN OUT

# one run: "PIECE ATONCE OVERRIDES..."; not started when the piece's longest run so far would
# not fit (the longest: a finished run found again takes ~12 s, a fresh machine's first run
# also tokenizes)
one() {
  local piece=$1 atonce=$2 left t0 expect p t
  shift 2
  left=$((DEADLINE - $(date +%s)))
  expect=0
  while IFS=$'\t' read -r p t _; do
    if [[ $p == "$piece" && $t -gt $expect ]]; then expect=$t; fi
  done <"$OUT/slot.tsv"
  [ "$expect" -gt 0 ] || expect=90
  if [ "$left" -lt "$expect" ]; then
    echo "limit: ${left} s left, a run of $piece takes ~${expect} s: not started: $*"
    return 0
  fi
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=60 "$left" $RUN "$@" >>"$OUT/slot.log" 2>&1 \
    || echo "exit $?: $*"
  printf '%s\t%s\t%s\t%s\n' "$piece" $(($(date +%s) - t0)) "$atonce" "$*" >>"$OUT/slot.tsv"
}
export -f one
at_once() { xargs -P "$1" -I{} -d '\n' bash -c "one $2 $1 {}"; }  # stdin: a run's overrides a line

# the lr check of arms ($4: "arm:init_std ..."), x2 beyond an edge twice at most, then seeds $5
# of each arm whose lr is settled (its grid whole, its best inside what ran): the protocol's
# steps (python -m tiedvsuntied.study.fair), each run a process of its own under the deadline
fair() {  # $1 piece, $2 overrides, $3 grid, $4 arms, $5 seeds, $6 sweep, $7 $8 at once: lr, seeds
  local step
  for step in lr edge edge seeds; do
    { $PY -m tiedvsuntied.study.fair sign_flip "$step" --sweep-dir "$R/$6" --grid "$3" \
        --cells "$4" --seeds "$5" --base "$2" --table "$OUT/lr_choice_$6.tsv" $(emb) || true; } |
      at_once "$([ "$step" = seeds ] && echo "$8" || echo "$7")" "$1"
  done
  pack
}
# piece b keeps each arm's emb_lr_mult chosen at nano (the second edition's lr_choice.tsv)
emb() { [ "$PIECE" != b ] || echo "--emb-lr-mult-from experiments/tie_x_init_books/lr_choice.tsv"; }

restore() {  # the study's bundles (results_gpu, results_small ...) into their sweeps
  $PY -m tiedvsuntied.study sign_flip restore --results "$R" >/dev/null
  [ ! -f "$LAST" ] || tar -xzf "$LAST" -C "$R" --skip-old-files
}

pack() {  # what has finished, into $OUT, as it lands
  local finished=() summary
  for summary in "$R"/sign_flip_{gpu,small}/*/summary.json; do
    [ -f "$summary" ] && grep -q '"status": "finished"' "$summary" || continue
    finished+=("$(dirname "${summary#"$R"/}")")
  done
  # nothing new since the last pack: nothing to do (a bundle and figures cost ~1 min)
  [ ${#finished[@]} -gt "${PACKED:-0}" ] || return 0
  PACKED=${#finished[@]}
  tar -czf "$OUT/slot_runs.tar.gz" --exclude=checkpoints --exclude=probes -C "$R" "${finished[@]}"
  for pair in results_gpu:sign_flip_gpu results_small:sign_flip_small; do
    ls "$R/${pair#*:}"/*/summary.json >/dev/null 2>&1 || continue
    $PY -m tiedvsuntied.bundle --no-arrays "$R/${pair#*:}" "$OUT/${pair%%:*}" \
      && $PY -m tiedvsuntied.figures "$OUT/${pair%%:*}" --out "$OUT/figures_${pair%%:*}" \
      >>"$OUT/slot.log" 2>&1 || echo "pack: ${pair#*:} not bundled (slot.log)"
  done
  echo "packed at $(elapsed) s: ${#finished[@]} finished runs"
}

: >"$OUT/slot.tsv"
restore
for PIECE in $PIECES; do
  case $PIECE in
    a) fair a "$A" "$LRS_A" "$D_SQRT" 1,2,3 sign_flip_gpu "$JOBS" "$JOBS_SEEDS" ;;
    b) fair b "$B" "$LRS_B" "$D_SQRT" 1,2,3,4 sign_flip_small 1 1
       fair b "$B" "$LRS_B" "tied:0.02 untied:0.02" 1,2,3,4 sign_flip_small 1 1 ;;
    c) for point in b384x6 b512x8 b768x12; do
         fair c "$C $($PY -m tiedvsuntied.study sign_flip at "$point") ${EXTRA_C:-}" "$LRS_A" "$D_SQRT" 1,2,3 \
           sign_flip_gpu 3 3
       done ;;
    *) echo "unknown piece '$PIECE': a b c" >&2; exit 2 ;;
  esac
done
pack
echo "slot done at $(elapsed) s of $LIMIT"
