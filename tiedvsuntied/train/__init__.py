"""The one trainer shared by every run: ``trainer.train(cfg)``, read top to bottom.

config.py      Config and its nodes (fields, docs, checks), the Schedule; no torch
plan.py        check_config: a job's RunPlan (the start's shapes and tying, the device)
trainer.py     train(): skip, resume or start a run; the loop; its records
setup.py       the run on this process: model, optimizer, checkpoint to resume from, Derived
state.py       Run, TrainState, Derived and the summary built from them
evaluation.py  fixed-window evaluation, what each records, the end of a run
checkpoint.py  last/prev/best/model.pt
optim.py       AdamW groups (named, each at its lr scale), the lr schedule, scheduled untying
dist.py        torchrun: sharding, rank 0's decisions, signals as a stop request
hardware.py    device, precision, compilation, peak FLOP/s
finetune.py    init_from: a finished run or Hugging Face GPT-2
probes.py      embedding-geometry probes
"""
