"""The end-to-end tests of tests/unit/test_gpt.py: the model compiled (torch.compile: tens of
seconds of CPU)."""

from __future__ import annotations

import torch
from conftest import batch, tiny

from tiedvsuntied.model.gpt import GPT


def test_grad_split_on_and_off_and_fresh_dicts_do_not_recompile():
    """The trainer passes a new dict on logging steps and None on the others."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    model = GPT(tiny(), seed=0)
    compiled = torch.compile(model, backend=counting_backend)
    x, y = batch(model.config)
    for step in range(6):
        compiled(x, y, return_logits=False, grad_split={} if step % 2 else None)[1].backward()
        if step == 1:
            after_warmup = len(graphs)  # both variants traced once
    assert len(graphs) == after_warmup
