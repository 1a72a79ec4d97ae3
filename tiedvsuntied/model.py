"""GPT-2 with a tied or untied output head, an explicit init table, and parameter accounting.

Read top to bottom: config -> init-std parsing -> blocks -> GPT (init, forward, chunked loss,
gradient split) -> accounting -> checkpoints and Hugging Face weights -> the `--table` CLI.

Tying means one (V, d) matrix used twice: as the lookup table on the way in (`wte`) and as
`h @ Eᵀ` on the way out (`lm_head`). It is one nn.Parameter, so `named_parameters()` lists it
once (as `transformer.wte.weight`) while `state_dict()` has both keys.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
from torch.nn import functional as F

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
IGNORE_INDEX = -1  # targets equal to this are left out of the loss (as in nanoGPT)
LN_EPS = 1e-5  # GPT-2's layer_norm_epsilon
INV_SQRT_D = ("inv_sqrt_d", "d^-0.5")  # init_std symbols meaning n_embd ** -0.5


# ----------------------------------------------------------------------------- config


@dataclass
class ModelConfig:
    name: str = "micro"          # size name (conf/model/<name>.yaml)
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 256
    vocab_size: int = 50257      # the trainer sets it from the tokenizer
    bias: bool = True
    dropout: float = 0.0
    tie: bool = True             # the run config's top-level `tie`
    init_std: str = "0.02"       # number, or "inv_sqrt_d" (= n_embd ** -0.5); top-level `init_std`
    emb_init_std: Optional[str] = None   # overrides init_std for wte (untied only)
    head_init_std: Optional[str] = None  # overrides init_std for lm_head (untied only)
    t5_rescale: bool = False     # multiply final hidden state by n_embd ** -0.5 before the head
    body_init_std: float = 0.02  # GPT-2 body init; residual projections / sqrt(2 n_layer)

    def validate(self) -> "ModelConfig":
        """Raise ValueError naming the bad field and what is valid; return self if all is well."""
        for f in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"ModelConfig.{f}={v!r} is invalid: it must be a positive integer")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"ModelConfig.n_embd={self.n_embd} is invalid: it must be divisible by "
                f"n_head={self.n_head} (each head gets n_embd / n_head dimensions)")
        for f in ("bias", "tie", "t5_rescale"):
            v = getattr(self, f)
            if not isinstance(v, bool):  # a string 'false' would be truthy: refuse it
                raise ValueError(f"ModelConfig.{f}={v!r} is invalid: it must be a bool (true or false)")
        d = self.dropout
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d < 1.0:
            raise ValueError(f"ModelConfig.dropout={d!r} is invalid: it must be a number in [0, 1)")
        b = self.body_init_std
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"ModelConfig.body_init_std={b!r} is invalid: it must be a number > 0")
        self.resolved_init_stds()  # parses init_std and the overrides, checks tied consistency
        return self

    def resolved_init_stds(self) -> dict[str, float]:
        """The numbers behind init_std / emb_init_std / head_init_std: {"emb": float, "head": float}.

        Tied, both are the std of the one shared matrix (so the overrides must agree)."""
        def std(override, field):
            if override is None:
                return resolve_init_std(self.init_std, self.n_embd, "init_std")
            return resolve_init_std(override, self.n_embd, field)

        emb, head = std(self.emb_init_std, "emb_init_std"), std(self.head_init_std, "head_init_std")
        if self.tie and emb != head:
            raise ValueError(
                f"ModelConfig: tie=true shares one matrix, which has one init std, but "
                f"emb_init_std={self.emb_init_std!r} and head_init_std={self.head_init_std!r} "
                f"(init_std={self.init_std!r}) resolve to {emb:g} and {head:g}: "
                f"set only init_std, or use tie=false")
        return {"emb": emb, "head": head}


def resolve_init_std(value, n_embd: int, field: str = "init_std") -> float:
    """'0.02' (or 0.02) -> 0.02; 'inv_sqrt_d' or 'd^-0.5' -> n_embd ** -0.5, so it follows the width."""
    if isinstance(value, str) and value.strip() in INV_SQRT_D:
        std = float(n_embd) ** -0.5
    else:
        try:
            if isinstance(value, bool):
                raise TypeError
            std = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"ModelConfig.{field}={value!r} is invalid: give a positive number such as '0.02' "
                f"or '1.0', or 'inv_sqrt_d' (also 'd^-0.5') for n_embd ** -0.5") from None
    if not math.isfinite(std) or std <= 0:
        raise ValueError(f"ModelConfig.{field}={value!r} is invalid: the std must be finite and > 0")
    return std


def _as_config(cfg) -> ModelConfig:
    """Accept a ModelConfig, a dict or an OmegaConf DictConfig (a Mapping)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    if isinstance(cfg, Mapping):
        names = {f.name for f in fields(ModelConfig)}
        unknown = sorted(set(cfg) - names)
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {unknown}; valid fields: {sorted(names)}")
        return ModelConfig(**{k: cfg[k] for k in cfg})
    raise TypeError(f"expected a ModelConfig or a mapping, got {type(cfg).__name__}")


def model_size_names(conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(p.stem for p in (Path(conf_dir) / "model").glob("*.yaml"))


def load_model_config(name: str, conf_dir: Path = CONF_DIR) -> ModelConfig:
    """ModelConfig from conf/model/<name>.yaml (defaults for the keys it leaves out)."""
    from omegaconf import OmegaConf

    path = Path(conf_dir) / "model" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown model size {name!r}; valid names: {', '.join(model_size_names(conf_dir))}")
    return _as_config(OmegaConf.to_container(OmegaConf.load(path), resolve=True)).validate()


# ----------------------------------------------------------------------------- blocks


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
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
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


# ----------------------------------------------------------------------------- init table

# The one table of initial values: init_weights() applies it, its docstring is generated from
# it, docs/model.md shows it, and tests/test_model.py measures every tensor against it.
# Every parameter must match exactly one row, so no init can silently overwrite another.
INIT_TABLE: tuple[tuple[str, str, str], ...] = (
    # tensor (fnmatch pattern)              init      std
    ("transformer.wte.weight",              "normal", "emb"),
    ("lm_head.weight",                      "normal", "head"),
    ("transformer.wpe.weight",              "normal", "body"),
    ("transformer.h.*.attn.c_attn.weight",  "normal", "body"),
    ("transformer.h.*.attn.c_proj.weight",  "normal", "resid"),
    ("transformer.h.*.mlp.c_fc.weight",     "normal", "body"),
    ("transformer.h.*.mlp.c_proj.weight",   "normal", "resid"),
    ("*ln_*.weight",                        "ones",   "-"),
    ("*.bias",                              "zeros",  "-"),
)

STD_LEGEND = {
    "emb": "emb_init_std if set, else init_std (tied: the std of the one shared matrix)",
    "head": "head_init_std if set, else init_std (untied only: tied, lm_head.weight is wte)",
    "body": "body_init_std (0.02, GPT-2)",
    "resid": "body_init_std / sqrt(2 * n_layer) (GPT-2: keeps the residual stream's variance from growing with depth)",
    "-": "constant",
}


def init_table_markdown() -> str:
    rows = ["| tensor | init | std |", "|---|---|---|"]
    rows += [f"| `{p}` | {i} | {s} |" for p, i, s in INIT_TABLE]
    legend = [f"- `{k}`: {v}" for k, v in STD_LEGEND.items()]
    return "\n".join(rows + ["", "std symbols:", *legend])


def init_rule(name: str) -> tuple[str, str]:
    """(init, std symbol) of a parameter name; error unless exactly one INIT_TABLE row matches."""
    hits = [(i, s) for p, i, s in INIT_TABLE if fnmatch.fnmatchcase(name, p)]
    if len(hits) != 1:
        raise RuntimeError(f"parameter {name!r} matches {len(hits)} INIT_TABLE rows, expected exactly 1")
    return hits[0]


def _tensor_seed(seed: int, name: str) -> int:
    # A stable hash (Python's hash() is salted per process) of (seed, tensor name).
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") >> 1


# ----------------------------------------------------------------------------- the model


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: Optional[int] = None):
        """Build and initialise. `seed` fixes the init (see init_weights) and leaves the global
        RNG alone; None draws one seed from the global torch RNG. Under
        `with torch.device("meta")` nothing is allocated or initialised."""
        super().__init__()
        cfg = _as_config(cfg).validate()  # before any tensor is allocated
        self.config = cfg
        device = torch.get_default_device()  # honours `with torch.device(...)`
        # Built on the meta device and then allocated empty: PyTorch's default per-module inits
        # would waste time, draw from the global RNG (more draws untied than tied, shifting
        # dropout masks later) and be overwritten anyway. init_weights sets every tensor.
        with torch.device("meta"):
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                drop=nn.Dropout(cfg.dropout),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.n_embd, eps=LN_EPS, bias=cfg.bias),
            ))
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self._tie_weights()  # tied: the head's own meta matrix is dropped, never allocated
        self.to_empty(device=device)
        self._tie_weights()  # to_empty gives each module its own new tensor, which unties
        self.loss_chunk = 1024         # rows per chunk of the chunked cross-entropy; None/0: off
        self.track_grad_split = False  # see _embedding_weights
        self.grad_split: dict[str, torch.Tensor] = {}
        self.init_seed: Optional[int] = None
        if device.type != "meta":
            self.init_weights(seed)

    def _tie_weights(self):
        if self.config.tie:
            self.lm_head.weight = self.transformer.wte.weight  # one Parameter, used twice

    @property
    def tied(self) -> bool:
        return self.lm_head.weight is self.transformer.wte.weight

    def init_stds(self) -> dict[str, float]:
        """The number behind each std symbol of INIT_TABLE, for this config."""
        c = self.config
        return {**c.resolved_init_stds(), "body": c.body_init_std,
                "resid": c.body_init_std / math.sqrt(2 * c.n_layer)}

    def init_weights(self, seed: Optional[int] = None) -> None:
        # The docstring is generated from INIT_TABLE below the class.
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())  # one draw from the global RNG
        self.init_seed = seed
        stds = self.init_stds()
        with torch.no_grad():
            for name, p in self.named_parameters():  # the tied matrix comes once, as wte
                init, std = init_rule(name)
                if init == "zeros":
                    p.zero_()
                elif init == "ones":
                    p.fill_(1.0)
                else:
                    # Drawn on the CPU from the tensor's own generator: the values do not depend
                    # on the device or on which other tensors exist (tied vs untied).
                    g = torch.Generator().manual_seed(_tensor_seed(seed, name))
                    p.copy_(torch.empty(p.shape).normal_(0.0, stds[std], generator=g))

    # ------------------------------------------------------------------ forward

    def _embedding_weights(self):
        """(lookup matrix, head matrix): the same Parameter twice when tied.

        With track_grad_split on, each side gets its own view of the matrix, so autograd keeps
        the lookup-side and head-side gradients apart; a hook on each view adds them into
        grad_split before they are summed into .grad. Off, the Parameters are used directly."""
        w_in, w_out = self.transformer.wte.weight, self.lm_head.weight
        if self.track_grad_split and torch.is_grad_enabled():
            w_in, w_out = self._tap(w_in, "in"), self._tap(w_out, "out")
        return w_in, w_out

    @torch.compiler.disable  # a hook on an intermediate breaks the graph: keep this bit eager
    def _tap(self, w: torch.Tensor, side: str) -> torch.Tensor:
        w = w.view_as(w)
        w.register_hook(partial(self._add_grad_split, side))
        return w

    def _add_grad_split(self, side: str, grad: torch.Tensor) -> None:
        grad = grad.detach().float()
        prev = self.grad_split.get(side)
        self.grad_split[side] = grad.clone() if prev is None else prev + grad

    def reset_grad_split(self) -> None:
        """Forget the accumulated split; grad_split is empty until the next tracked backward."""
        self.grad_split = {}

    def forward(self, idx, targets=None, return_logits=True):
        """idx (B, T) int64 -> (logits (B, T, V) fp32 or None, loss or None).

        With targets and return_logits=False the loss is a chunked cross-entropy that never
        holds more than `self.loss_chunk` rows of logits (logits come back as None);
        loss_chunk None or 0 computes it from all the logits at once instead."""
        T = idx.size(1)
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        w_in, w_out = self._embedding_weights()
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(F.embedding(idx, w_in) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if self.config.t5_rescale:
            x = x * self.config.n_embd ** -0.5  # T5: the tied head sees d^-0.5 * h
        if targets is not None and not return_logits and self.loss_chunk:
            return None, chunked_cross_entropy(x, w_out, targets, self.loss_chunk)
        logits = F.linear(x, w_out).float()  # fp32 even under autocast: the softmax needs it
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
        return (logits if return_logits else None), loss

    # ------------------------------------------------------------------ checkpoints

    @classmethod
    def _uninitialised(cls, cfg: ModelConfig, device="cpu") -> "GPT":
        """A model whose every tensor is about to be loaded: skip the init."""
        with torch.device("meta"):
            model = cls(cfg)
        model.to_empty(device=device)
        model._tie_weights()
        return model

    def _load_strict(self, state_dict: Mapping, source: str) -> None:
        """load_state_dict, with the missing/unexpected keys named and tying checked."""
        expected, got = set(self.state_dict()), set(state_dict)
        missing, unexpected = sorted(expected - got), sorted(got - expected)
        if missing or unexpected:
            raise ValueError(f"{source}: weights do not fit this model: missing keys {missing}, "
                             f"unexpected keys {unexpected}")
        if self.tied and not torch.equal(state_dict["transformer.wte.weight"], state_dict["lm_head.weight"]):
            raise ValueError(f"{source}: the model is tied but lm_head.weight differs from "
                             f"transformer.wte.weight (an untied checkpoint): load it with tie=false")
        self.load_state_dict(state_dict, strict=True)

    def save(self, path) -> None:
        """Config (plain dict) + state_dict, written atomically; tying survives (one storage)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"config": asdict(self.config), "state_dict": self.state_dict()}, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path, map_location="cpu") -> "GPT":
        """A model saved by save(), on the device map_location."""
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
        model = cls._uninitialised(_as_config(ckpt["config"]), device=map_location)
        model._load_strict(ckpt["state_dict"], source=str(path))
        return model

    @classmethod
    def from_pretrained(cls, path_or_name, tie: bool = True, **overrides) -> "GPT":
        """GPT-2 weights in Hugging Face format: a local directory with config.json and
        model.safetensors (or pytorch_model.bin), or a Hub name such as "gpt2" where reachable.

        tie=False from a tied checkpoint starts the new head as a COPY of the embedding (a fresh
        head would be random). `overrides` set other ModelConfig fields (dropout, block_size
        <= n_positions crops wpe, ...); the shape fields come from the checkpoint."""
        directory = _pretrained_dir(path_or_name)
        hf = json.loads((directory / "config.json").read_text())
        shape = _config_from_hf(hf, source=str(directory))
        for k, v in overrides.items():
            if k in shape and k != "block_size" and v != shape[k]:
                raise ValueError(f"{k}={v!r} conflicts with the checkpoint ({shape[k]!r}); it cannot be overridden")
        block_size = overrides.pop("block_size", shape.pop("block_size"))
        if block_size > hf["n_positions"]:
            raise ValueError(f"block_size={block_size} exceeds the checkpoint's n_positions={hf['n_positions']}")
        cfg = _as_config({"name": str(path_or_name), **shape, **overrides,
                          "block_size": block_size, "tie": tie}).validate()

        sd = _state_dict_from_hf(_read_hf_weights(directory))
        sd["transformer.wpe.weight"] = sd["transformer.wpe.weight"][:block_size]
        wte, head = sd["transformer.wte.weight"], sd.get("lm_head.weight")
        if head is None:
            if not hf.get("tie_word_embeddings", True):
                raise ValueError(f"{directory}: config says tie_word_embeddings=false but there is no lm_head.weight")
            head = wte if tie else wte.clone()  # untie for fine-tuning: copy, never random
        elif tie and not torch.equal(head, wte):
            raise ValueError(f"{directory}: the checkpoint has its own lm_head.weight; load it with tie=False")
        sd["lm_head.weight"] = head
        model = cls._uninitialised(cfg)
        model._load_strict(sd, source=str(directory))
        return model

    def save_pretrained(self, directory) -> None:
        """Hugging Face GPT-2 format (config.json + model.safetensors), readable by
        GPT.from_pretrained and transformers' GPT2LMHeadModel.from_pretrained."""
        from safetensors.torch import save_file

        c = self.config
        if not c.bias or c.t5_rescale:
            raise ValueError("GPT2LMHeadModel has biases and no T5 rescale: cannot export bias=false or t5_rescale=true")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, t in self.state_dict().items():
            if k == "lm_head.weight" and self.tied:
                continue  # safetensors cannot store one tensor twice; HF re-ties from the config
            if k.endswith(_CONV1D_WEIGHTS):
                t = t.t()  # HF's Conv1D stores (in, out)
            tensors[k] = t.detach().to("cpu", torch.float32).contiguous()
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
        hf = {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": c.vocab_size, "n_positions": c.block_size, "n_ctx": c.block_size,
            "n_embd": c.n_embd, "n_layer": c.n_layer, "n_head": c.n_head, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
            "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
            "initializer_range": c.body_init_std, "tie_word_embeddings": self.tied,
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "torch_dtype": "float32",
        }
        if c.vocab_size > 50256:
            hf.update(bos_token_id=50256, eos_token_id=50256)  # GPT-2's <|endoftext|>
        (directory / "config.json").write_text(json.dumps(hf, indent=2) + "\n")


GPT.init_weights.__doc__ = f"""Initialise every parameter exactly once, from INIT_TABLE:

{init_table_markdown()}

Each tensor draws from its own generator seeded from (seed, tensor name), on the CPU. So the
same seed gives a tied and an untied model the same body and the same wte, whichever tensors
exist and in whatever order, and the same values on any device. Tied, lm_head.weight is not a
parameter of its own (named_parameters lists the matrix once, as wte): nothing re-inits it.
"""


# ----------------------------------------------------------------------------- chunked loss


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
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if compute_grad else None
        # One fp32 buffer for all chunks, and in-place softmax: on a CPU, fresh (rows, V)
        # allocations cost more than the arithmetic on them.
        buf = None if x.dtype == torch.float32 or torch.compiler.is_compiling() else torch.empty(min(chunk, n), vocab, dtype=torch.float32,
                                                                 device=x.device)
        for start in range(0, n, chunk):  # the number of chunks depends on shapes only
            xc, tc = x[start:start + chunk], targets[start:start + chunk]
            valid = tc != IGNORE_INDEX
            tc = tc.clamp(min=0)  # ignored rows: any class, masked out below
            with torch.autocast(x.device.type, enabled=False):
                raw = F.linear(xc, weight)  # bf16 under autocast (cast above)
            # Each pass over (rows, V) costs more than the matmul here. Mixed-dtype kernels
            # (bf16 in, fp32 out) are several times slower on CPU than a plain copy, so the
            # softmax works in one fp32 buffer: raw's own memory when it is fp32 already.
            if raw.dtype == torch.float32:
                logits = raw
            elif torch.compiler.is_compiling():
                logits = raw.float()  # inductor fuses the cast into the passes below
            else:
                logits = buf[:len(xc)].copy_(raw)
            target_logit = logits.gather(1, tc[:, None]).squeeze(1)
            row_max = logits.amax(dim=1, keepdim=True)
            probs = logits.sub_(row_max).exp_()  # softmax numerators, in place
            denom = probs.sum(dim=1, keepdim=True)
            lse = (row_max + denom.log()).squeeze(1)
            loss = loss + torch.where(valid, lse - target_logit, 0.0).sum()
            if compute_grad:
                # d(mean CE)/d(logits) = (softmax - onehot(target)) / n_valid on valid rows
                #                      = (numerators - denom * onehot) * scale / denom
                scale = (valid / n_valid)[:, None]
                probs.scatter_add_(1, tc[:, None], -denom).mul_(scale / denom)
                if torch.compiler.is_compiling():
                    g = probs.to(raw.dtype)
                else:
                    g = probs if probs.data_ptr() == raw.data_ptr() else raw.copy_(probs)  # matmul dtype
                with torch.autocast(x.device.type, enabled=False):
                    grad_x[start:start + chunk] = g @ weight
                    grad_w += g.t() @ xc
        if compute_grad:
            ctx.save_for_backward(grad_x, grad_w.to(w_dtype))
        return loss / n_valid

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss, grad_w * grad_loss, None, None, None


def chunked_cross_entropy(x, weight, targets, chunk: int = 1024):
    """F.cross_entropy(x @ weightᵀ, targets, ignore_index=-1) (mean) without all the logits.

    x (..., d), weight (V, d), targets (...). Used by GPT.forward(..., return_logits=False)."""
    x = x.reshape(-1, x.size(-1))
    targets = targets.reshape(-1)
    compute_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(x, weight, targets, int(chunk), compute_grad)


# ----------------------------------------------------------------------------- accounting


def _as_model(model_or_cfg) -> GPT:
    if isinstance(model_or_cfg, nn.Module):
        # unwrap torch.compile / DDP wrappers
        model = getattr(model_or_cfg, "_orig_mod", model_or_cfg)
        return getattr(model, "module", model)
    with torch.device("meta"):  # shapes only: nothing allocated, nothing initialised
        return GPT(_as_config(model_or_cfg))


def count_parameters(model_or_cfg) -> dict[str, int]:
    """Unique parameters: the tied matrix counts once (it is one Parameter).

    {"total", "embedding" (wte), "position" (wpe), "head" (lm_head; 0 when tied),
     "non_embedding" = total - embedding - position - head}. A ModelConfig is counted on a
    meta-device model, so GPT-2 XL costs nothing to count."""
    m = _as_model(model_or_cfg)
    total = sum(p.numel() for p in m.parameters())  # parameters() yields a shared one once
    emb = m.transformer.wte.weight.numel()
    pos = m.transformer.wpe.weight.numel()
    head = 0 if m.tied else m.lm_head.weight.numel()
    return {"total": total, "embedding": emb, "position": pos, "head": head,
            "non_embedding": total - emb - pos - head}


def flops_per_token(model_or_cfg) -> float:
    """Training FLOPs per token (forward + backward), for MFU; the PaLM / nanoGPT estimate.

    6 * N_matmul + 12 * n_layer * n_embd * block_size, where
    - N_matmul = non-embedding parameters + V * d: every weight touched by a matmul, the head
      included in both modes (tied or not, `h @ Eᵀ` costs the same); the embedding lookups are
      gathers, not matmuls, so wte-as-lookup and wpe are left out. LayerNorm gains and biases
      are counted too (< 1%, as in nanoGPT);
    - 6 = 2 (multiply-add) x 3 (forward, backward to activations, backward to weights);
    - the attention term is QKᵀ and AV over a full block_size context (causal masking not
      discounted). Tied and untied models therefore have the same FLOPs per token."""
    m = _as_model(model_or_cfg)
    c = m.config
    n_matmul = count_parameters(m)["non_embedding"] + c.vocab_size * c.n_embd
    return float(6 * n_matmul + 12 * c.n_layer * c.n_embd * c.block_size)


# ----------------------------------------------------------------------------- HF format

_CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_HF_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")  # causal masks in old checkpoints


def _pretrained_dir(path_or_name) -> Path:
    path = Path(path_or_name).expanduser()
    if path.is_dir():
        return path
    name = str(path_or_name)
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"{name}: not a directory (expected config.json + model.safetensors)")
    try:
        from huggingface_hub import snapshot_download

        patterns = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors"]
        # A short metadata timeout: an unreachable Hub fails in seconds.
        directory = Path(snapshot_download(name, allow_patterns=patterns, etag_timeout=5))
        if not any(directory.glob("*.safetensors")):
            directory = Path(snapshot_download(name, allow_patterns=["config.json", "pytorch_model.bin"], etag_timeout=5))
        return directory
    except Exception as e:
        raise OSError(
            f"could not get {name!r} from the Hugging Face Hub ({type(e).__name__}: {e}). "
            f"If the Hub is unreachable, download the model where it is reachable and pass its local "
            f"directory instead: GPT.from_pretrained('/path/to/{name}') (config.json + model.safetensors "
            f"or pytorch_model.bin)") from e


def _config_from_hf(hf: dict, source: str) -> dict:
    """The ModelConfig shape fields of a GPT-2 config.json; error on what this model can't do."""
    checks = {
        "model_type": (hf.get("model_type", "gpt2"), ("gpt2",)),
        "activation_function": (hf.get("activation_function", "gelu_new"), ("gelu_new", "gelu_pytorch_tanh")),
        "layer_norm_epsilon": (hf.get("layer_norm_epsilon", LN_EPS), (LN_EPS,)),
        "scale_attn_weights": (hf.get("scale_attn_weights", True), (True,)),
        "scale_attn_by_inverse_layer_idx": (hf.get("scale_attn_by_inverse_layer_idx", False), (False,)),
        "add_cross_attention": (hf.get("add_cross_attention", False), (False,)),
        "n_inner": (hf.get("n_inner"), (None, 4 * hf["n_embd"])),
    }
    for key, (value, ok) in checks.items():
        if value not in ok:
            raise ValueError(f"{source}: {key}={value!r} is not supported (supported: {list(ok)})")
    return {"vocab_size": hf["vocab_size"], "n_layer": hf["n_layer"], "n_head": hf["n_head"],
            "n_embd": hf["n_embd"], "block_size": hf["n_positions"], "bias": True}


def _read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {k: v for f in files for k, v in load_file(directory / f).items()}
    if (directory / "model.safetensors").is_file():
        return load_file(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{directory}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def _state_dict_from_hf(hf_sd: dict) -> dict[str, torch.Tensor]:
    """HF GPT-2 names -> ours (prefix 'transformer.'), Conv1D (in, out) -> Linear (out, in)."""
    sd = {}
    for key, t in hf_sd.items():
        k = key.removeprefix("transformer.")
        if _HF_BUFFERS.fullmatch(k):
            continue  # not weights: the causal mask, which SDPA's is_causal replaces
        if k == "lm_head.weight":
            sd[k] = t
            continue
        if k.endswith(_CONV1D_WEIGHTS):
            t = t.t()
        sd["transformer." + k] = t  # any unknown key stays, so the strict load names it
    return sd


# ----------------------------------------------------------------------------- CLI


def parameter_table(fmt: str = "markdown", conf_dir: Path = CONF_DIR, vocab_size: int = 50257) -> str:
    """Every size in conf/model/: layers, heads, width, context, parameters tied and untied,
    FLOPs/token. Counted on meta-device models."""
    head = ["size", "n_layer", "n_head", "n_embd", "block_size", "total (tied)", "total (untied)",
            "non-embedding", "embedding (wte)", "position (wpe)", "head (untied)", "GFLOPs/token"]
    sized = []  # (tied total, row): smallest first
    for name in model_size_names(conf_dir):
        c = load_model_config(name, conf_dir)
        tied_model = _as_model(ModelConfig(**{**asdict(c), "vocab_size": vocab_size, "tie": True}))
        tied = count_parameters(tied_model)
        untied = count_parameters(ModelConfig(**{**asdict(c), "vocab_size": vocab_size, "tie": False}))
        sized.append((tied["total"], [
            c.name, c.n_layer, c.n_head, c.n_embd, c.block_size, f"{tied['total']:,}",
            f"{untied['total']:,}", f"{tied['non_embedding']:,}", f"{tied['embedding']:,}",
            f"{tied['position']:,}", f"{untied['head']:,}", f"{flops_per_token(tied_model) / 1e9:.3f}"]))
    rows = [[str(x) for x in r] for _, r in sorted(sized)]
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    elif fmt == "latex":
        esc = lambda s: s.replace("_", r"\_").replace(",", "{,}")  # noqa: E731
        lines = [r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule",
                 " & ".join(esc(h) for h in head) + r" \\", r"\midrule"]
        lines += [" & ".join(esc(x) for x in r) + r" \\" for r in rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
    else:
        raise ValueError(f"format {fmt!r}: use markdown or latex")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tiedvsuntied.model", description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="print the parameter table of every size in conf/model/")
    ap.add_argument("--format", choices=["markdown", "latex"], default="markdown")
    ap.add_argument("--vocab-size", type=int, default=50257)
    args = ap.parse_args(argv)
    if not args.table:
        ap.print_help()
        return 2
    print(parameter_table(args.format, vocab_size=args.vocab_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
