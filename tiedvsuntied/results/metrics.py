"""The names of the logged metrics, once: the trainer logs under them (metrics.jsonl, mirrored
by W&B under the same names) and the reading side (analysis, figures, the sweep's dashboard)
reads the history's columns by them. A prefix ends in "/" or "_" and is followed by a stratum,
a side or a group's name. No torch."""

TOKENS = "tokens"  # tokens trained on so far, beside every logged step

# every training step that logs (trainer.log_first, then schedule.logs)
TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"  # the body's; the embedding side's under TRAIN_LR_ + the group's name
TRAIN_LR_ = "train/lr_"
TRAIN_TOKENS_PER_S = "train/tokens_per_s"
TRAIN_GRAD_NORM = "train/grad_norm"  # pre-clip; the embedding's two sides under _in, _out
TRAIN_GRAD_NORM_IN = f"{TRAIN_GRAD_NORM}_in"  # through the lookup
TRAIN_GRAD_NORM_OUT = f"{TRAIN_GRAD_NORM}_out"  # through the head
TRAIN_MFU = "train/mfu"
TRAIN_CLIP_FRAC = "train/clip_frac"

# every evaluation
VAL_LOSS = "val/loss"
VAL_PPL = "val/ppl"
VAL_BPB = "val/bpb"
INIT_ = "init/"  # step 0 only: init/logit_std, init/self_logit, init/self_target_frac
INIT_LOGIT_STD = f"{INIT_}logit_std"
INIT_SELF_LOGIT = f"{INIT_}self_logit"
PROBE_ = "probe/"  # embedding-geometry probes: probe/<stratum>/<name> (docs/model.md#probes)
DRIFT_ = "drift/"  # fine-tuning: drift/<side>_cos_<seen|unseen>, drift/<side>_norm_<...>
DRIFT_EMB_COS_SEEN = f"{DRIFT_}emb_cos_seen"
DRIFT_EMB_COS_UNSEEN = f"{DRIFT_}emb_cos_unseen"
RETAIN_LOSS = "retain/loss"  # fine-tuning: the loss on the start's own validation split

# the end of a finished run
TEST_LOSS = "test/loss"
TEST_PPL = "test/ppl"
TEST_LOSS_AT_BEST = "test/loss_at_best"
TEST_BPB = "test/bpb"

PARAMS_ = "params/"  # parameter counts, logged when a scheduled untying adds the head's
