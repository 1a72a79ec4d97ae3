"""The chunked linear cross-entropy: the loss of `x @ weightᵀ` without all the logits.

On a CPU with V = 50257 the (B*T, V) logits and their gradient dominate a training step's
time and memory; this computes the loss and both gradients `chunk` rows at a time. Tuned for
CPU bf16 autocast and for torch.compile: every pass over a (rows, V) block is counted.
"""

from __future__ import annotations

from functools import partial

import torch
from torch.nn import functional as F

IGNORE_INDEX = -1  # targets equal to this are left out of the loss (as in nanoGPT)


def _fp32_logits(raw: torch.Tensor, buf: torch.Tensor | None) -> torch.Tensor:
    """The chunk's logits in fp32, for an in-place softmax.

    Each pass over (rows, V) costs more than the matmul that made it. Mixed-dtype kernels
    (bf16 in, fp32 out) are several times slower on CPU than a plain copy, so the softmax
    works in one fp32 buffer: raw's own memory when it is fp32 already."""
    if raw.dtype == torch.float32:
        return raw
    if torch.compiler.is_compiling():
        return raw.float()  # inductor fuses the cast into the passes that follow
    return buf[: len(raw)].copy_(raw)


def _in_matmul_dtype(probs: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """The logits' gradient (in probs, fp32) in the matmul dtype, reusing raw's memory."""
    if torch.compiler.is_compiling():
        return probs.to(raw.dtype)
    return probs if probs.data_ptr() == raw.data_ptr() else raw.copy_(probs)


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits = x @ weightᵀ, `chunk` rows at a time.

    The gradients are computed in forward, chunk by chunk, so no more than chunk x V logits
    ever exist, not even saved for backward; backward only scales them by the incoming grad.
    Same FLOPs as the plain path (no recomputation)."""

    @staticmethod
    def forward(ctx, x, weight, targets, chunk: int, compute_grad: bool):
        n, vocab = x.size(0), weight.size(0)
        x_dtype, w_dtype = x.dtype, weight.dtype
        if torch.is_autocast_enabled(x.device.type):
            # Cast x and the (V, d) weight to the autocast dtype once, not in each of the
            # 3 matmuls of every chunk; the matmuls below then run in that dtype.
            mm_dtype = torch.get_autocast_dtype(x.device.type)
            x, weight = x.to(mm_dtype), weight.to(mm_dtype)
        n_valid = (targets != IGNORE_INDEX).sum()
        loss = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_x = torch.zeros_like(x, dtype=x_dtype) if compute_grad else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if compute_grad else None
        # One fp32 buffer for all chunks, and in-place softmax: on a CPU, fresh (rows, V)
        # allocations cost more than the arithmetic on them.
        buf = (
            None
            if x.dtype == torch.float32 or torch.compiler.is_compiling()
            else torch.empty(min(chunk, n), vocab, dtype=torch.float32, device=x.device)
        )
        for start in range(0, n, chunk):  # the number of chunks depends on shapes only
            rows, target = x[start : start + chunk], targets[start : start + chunk]
            valid = target != IGNORE_INDEX
            target = target.clamp(min=0)  # ignored rows: any class, masked out below
            with torch.autocast(x.device.type, enabled=False):
                raw = F.linear(rows, weight)  # bf16 under autocast (cast above)
            logits = _fp32_logits(raw, buf)
            target_logit = logits.gather(1, target[:, None]).squeeze(1)
            row_max = logits.amax(dim=1, keepdim=True)
            probs = logits.sub_(row_max).exp_()  # softmax numerators, in place
            denom = probs.sum(dim=1, keepdim=True)
            lse = (row_max + denom.log()).squeeze(1)
            loss = loss + torch.where(valid, lse - target_logit, 0.0).sum()
            if compute_grad:
                # d(mean CE)/d(logits) = (softmax - onehot(target)) / n_valid on valid rows
                #                      = (numerators - denom * onehot) * scale / denom
                scale = (valid / n_valid)[:, None]
                probs.scatter_add_(1, target[:, None], -denom).mul_(scale / denom)
                g = _in_matmul_dtype(probs, raw)
                with torch.autocast(x.device.type, enabled=False):
                    grad_x[start : start + chunk] = g @ weight
                    grad_w += g.t() @ rows
        if compute_grad:
            ctx.save_for_backward(grad_x, grad_w.to(w_dtype))
        return loss / n_valid

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss, grad_w * grad_loss, None, None, None


def chunked_cross_entropy(x, weight, targets, chunk: int = 1024, reduction: str = "mean"):
    """F.cross_entropy(x @ weightᵀ, targets, ignore_index=-1) without all the logits.

    x (..., d), weight (V, d), targets (...). Used by GPT.forward(..., return_logits=False).
    reduction "none" (evaluation, no gradient): the per-token losses, shaped like targets."""
    shape = targets.shape
    x = x.reshape(-1, x.size(-1))
    targets = targets.reshape(-1)
    if reduction == "none":
        ce = partial(F.cross_entropy, ignore_index=IGNORE_INDEX, reduction="none")
        pieces = zip(x.split(chunk), targets.split(chunk), strict=True)
        return torch.cat([ce(F.linear(rows, weight).float(), t) for rows, t in pieces]).view(shape)
    compute_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(x, weight, targets, int(chunk), compute_grad)
