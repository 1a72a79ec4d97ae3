"""GPT-2 with a tied or untied output head and one explicit init table; read top to bottom:
blocks, the init table, GPT (build, tie, init, forward, gradient split), freezing.

Tying means one (V, d) matrix used twice: as the lookup table on the way in (`wte`) and as
`h @ Eᵀ` on the way out (`lm_head`). It is one nn.Parameter, so `named_parameters()` lists it
once (as `transformer.wte.weight`) while `state_dict()` has both keys. The run keys `tie` and
`init_std` and the `head` node are arguments of GPT, not fields of ModelConfig.
"""

from __future__ import annotations

import fnmatch
import hashlib

import torch
import torch.nn as nn
from torch.nn import functional as F

from tiedvsuntied.model.accounting import unwrap
from tiedvsuntied.model.config import (
    HeadConfig,
    ModelConfig,
    ModelConfigError,
    Trainable,
    Untie,
    as_model_config,
    check_config,
    multiplier,
)
from tiedvsuntied.model.loss import IGNORE_INDEX, chunked_cross_entropy

LN_EPS = 1e-5  # GPT-2's layer_norm_epsilon


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v at once
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # pre-LN: the residual stream itself is never normalised
        return x + self.mlp(self.ln_2(x))


# The one table of initial values: init_weights() applies it, docs/model.md shows it and says
# what each std symbol (a key of check_config's result) means, and tests/unit/test_gpt.py measures
# every tensor against that page. Every parameter must match exactly one row, so no init can
# silently overwrite another.
INIT_TABLE: tuple[tuple[str, str, str], ...] = (
    # tensor (fnmatch pattern)              init      std
    ("transformer.wte.weight", "normal", "emb"),
    ("lm_head.weight", "normal", "head"),
    ("transformer.wpe.weight", "normal", "body"),
    ("transformer.h.*.attn.c_attn.weight", "normal", "body"),
    ("transformer.h.*.attn.c_proj.weight", "normal", "resid"),
    ("transformer.h.*.mlp.c_fc.weight", "normal", "body"),
    ("transformer.h.*.mlp.c_proj.weight", "normal", "resid"),
    ("*ln_*.weight", "ones", "-"),
    ("*.bias", "zeros", "-"),
)


def _normal(seed: int, name: str, shape: torch.Size, std: float) -> torch.Tensor:
    """N(0, std²) on the CPU from a generator of its own for (seed, tensor name): a tensor's
    values depend on neither the device nor which other tensors exist (tied vs untied)."""
    # sha256, not hash(): Python salts hash() per process.
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.empty(shape).normal_(0.0, std, generator=g)


@torch.compiler.disable  # a hook on an intermediate breaks the graph: keep this bit eager
def _tap(w: torch.Tensor, store: dict, side: str) -> torch.Tensor:
    """A view of w whose gradient is also added into store[side] (fp32) during backward."""

    def accumulate(grad: torch.Tensor) -> None:
        grad = grad.detach().float()
        if side in store:
            store[side].add_(grad)
        else:
            store[side] = grad.clone()  # our own copy: autograd may reuse `grad`

    w = w.view_as(w)
    w.register_hook(accumulate)
    return w


class _ScaleGrad(torch.autograd.Function):
    """The identity on the way forward (a view: not one bit changes); the gradient times
    ``scale`` on the way back. A custom Function rather than ``s*w + (1-s)*w.detach()``, which
    would round the forward pass and cost three passes over the matrix; torch.compile traces it
    (fullgraph, tested)."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return w.view_as(w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class GPT(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        *,
        tie: bool = True,
        init_std: str | float = "0.02",
        head: HeadConfig | None = None,
        seed: int | None = None,
    ):
        """Build and initialise. `seed` fixes the init (see init_weights) and leaves the global
        RNG alone; None draws one seed from the global torch RNG. Under
        `with torch.device("meta")` nothing is allocated or initialised."""
        super().__init__()
        cfg, head = as_model_config(cfg), head or HeadConfig()
        self._init_stds = check_config(cfg, tie=tie, init_std=init_std, head=head)  # no alloc
        self.config, self.tie, self.init_std, self.head = cfg, tie, init_std, head
        self.logit_scale = head.scale(tie, cfg.n_embd)
        self.input_grad_scale = head.input_grad_scale(tie)  # applies while tied (untie_at)
        self.emb_scale = multiplier(cfg.emb_scale, cfg.n_embd, "model.emb_scale")
        device = torch.get_default_device()  # honours `with torch.device(...)`
        # Built on the meta device and then allocated empty: PyTorch's default per-module inits
        # would waste time, draw from the global RNG (more draws untied than tied, shifting
        # dropout masks later) and be overwritten anyway. init_weights sets every tensor.
        with torch.device("meta"):
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                    wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                    drop=nn.Dropout(cfg.dropout),
                    h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
                    ln_f=nn.LayerNorm(cfg.n_embd, eps=LN_EPS, bias=cfg.bias),
                )
            )
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.to_empty(device=device)  # ties the head when tie (see to_empty)
        self.init_seed: int | None = None
        if device.type != "meta":
            self.init_weights(seed)

    def to_empty(self, *, device, recurse: bool = True) -> GPT:
        """nn.Module.to_empty that keeps the tie. The base class gives every module a new
        tensor, which would untie the head (and allocate a second V x d matrix)."""
        self.transformer.to_empty(device=device, recurse=recurse)
        if self.tie:
            self.lm_head.weight = self.transformer.wte.weight  # one Parameter, used twice
        else:
            self.lm_head.to_empty(device=device, recurse=recurse)
        return self

    def untie(self, how: Untie = Untie.copy) -> None:
        """Give the head a matrix of its own, e.g. to fine-tune it alone. ``copy``: a copy of the
        embedding, so the function is unchanged; ``fresh``: drawn like an untied model's head of
        the same seed (init std "head"): the random head of a common fine-tuning mistake;
        ``keep``: nothing. The logit scale stays as it was, a tied T5 head's d^-0.5 included:
        untying by copy changes no logit."""
        if Untie(how) == Untie.keep:
            return
        if not self.tie:
            raise ModelConfigError(
                "head.untie: the model is already untied; valid only from a tied start"
            )
        w = self.transformer.wte.weight.detach()
        if how == Untie.copy:
            new = w.clone()
        else:  # as init_weights draws it
            new = _normal(self.init_seed or 0, "lm_head.weight", w.shape, self._init_stds["head"])
            new = new.to(w)
        self.lm_head.weight = nn.Parameter(new)
        self.tie = False

    def init_stds(self) -> dict[str, float]:
        """The number behind each std symbol of INIT_TABLE."""
        return dict(self._init_stds)

    def init_weights(self, seed: int | None = None) -> None:
        """Initialise every parameter exactly once, from INIT_TABLE. Each tensor draws from its
        own CPU generator (`_normal`): the same seed gives a tied and an untied model the same
        body and wte, and the same values on any device. Tied, lm_head.weight is no parameter
        of its own (named_parameters lists the matrix once, as wte): nothing re-inits it."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())  # one draw from the global RNG
        self.init_seed = seed
        with torch.no_grad():
            for name, p in self.named_parameters():
                rows = [row[1:] for row in INIT_TABLE if fnmatch.fnmatchcase(name, row[0])]
                if len(rows) != 1:
                    raise RuntimeError(f"parameter {name!r} matches {len(rows)} INIT_TABLE rows")
                init, std = rows[0]
                if init == "zeros":
                    p.zero_()
                elif init == "ones":
                    p.fill_(1.0)
                else:  # drawn on the CPU, then copied
                    p.copy_(_normal(seed, name, p.shape, self._init_stds[std]))

    def forward(
        self,
        idx,
        targets=None,
        *,
        loss_chunk: int | None = 1024,
        return_logits: bool = True,
        grad_split: dict | None = None,
        reduction: str = "mean",
    ):
        """idx (B, T) int64 -> (logits (B, T, V) fp32 or None, loss or None).

        With targets and return_logits=False the loss is loss.py's chunked cross-entropy,
        never more than `loss_chunk` rows of logits (None or 0: all the logits at once).
        `grad_split`: a dict into which backward adds "in" (lookup side) and "out" (head side)
        fp32 gradients of the embedding matrix; the same dict sums over micro-batches. Tied,
        "in" is after head.tied_input_grad_scale: in + out is the matrix's gradient."""
        T = idx.size(1)
        if self.config.block_size < T:
            raise ValueError(f"sequence length {T} > model.block_size={self.config.block_size}")
        w_in, w_out = self.transformer.wte.weight, self.lm_head.weight
        if grad_split is not None and torch.is_grad_enabled():
            # Tied, each side gets its own view of the one matrix, so autograd keeps the two
            # gradients apart until it sums them into .grad. Frozen: no gradient to split.
            w_in, w_out = (
                _tap(w, grad_split, side) if w.requires_grad else w
                for w, side in ((w_in, "in"), (w_out, "out"))
            )
        if self.tie and self.input_grad_scale != 1.0 and torch.is_grad_enabled():
            # After the tap: the split's "in" is the scaled gradient, what reaches the matrix.
            w_in = _ScaleGrad.apply(w_in, self.input_grad_scale)
        tok = F.embedding(idx, w_in)
        if self.emb_scale != 1.0:
            tok = tok * self.emb_scale
        x = self.transformer.drop(tok + self.transformer.wpe(torch.arange(T, device=idx.device)))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if self.logit_scale != 1.0:
            # On h rather than on the logits: the same product, and the chunked loss needs it.
            x = x * self.logit_scale
        if targets is not None and not return_logits and loss_chunk:
            return None, chunked_cross_entropy(x, w_out, targets, loss_chunk, reduction)
        logits = _head(x, w_out).float()  # fp32 even under autocast: the softmax needs it
        if targets is None:
            return logits, None
        loss = F.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction=reduction
        )
        if reduction == "none":
            loss = loss.view(targets.shape)
        return (logits if return_logits else None), loss


def _head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ. On CUDA the matrix is padded to a multiple of 64 rows for the product and
    the extra logits cut off: GPT-2's V = 50,257 is odd, and cuBLAS's tensor-core tiles run
    faster on a multiple of 64 (nanoGPT pads its vocabulary to 50,304 for this). The function
    and the parameters are unchanged; the copy costs one read of the matrix per step."""
    pad = -weight.size(0) % 64
    if not x.is_cuda or not pad:
        return F.linear(x, weight)
    return F.linear(x, F.pad(weight, (0, 0, 0, pad)))[..., : weight.size(0)]


def set_trainable(model: nn.Module, which: Trainable) -> dict[str, int]:
    """Freeze all but ``which``; returns the {"trainable", "frozen"} unique parameters."""
    gpt = unwrap(model)
    emb = {id(gpt.transformer.wte.weight), id(gpt.transformer.wpe.weight)}
    chosen = {
        Trainable.all: lambda p: True,
        Trainable.head: lambda p: p is gpt.lm_head.weight,
        Trainable.embedding: lambda p: id(p) in emb,
        Trainable.body: lambda p: id(p) not in emb and p is not gpt.lm_head.weight,
    }[Trainable(which)]
    counts = {"trainable": 0, "frozen": 0}
    for p in gpt.parameters():  # a tied matrix comes once
        p.requires_grad_(chosen(p))
        counts["trainable" if p.requires_grad else "frozen"] += p.numel()
    return counts
