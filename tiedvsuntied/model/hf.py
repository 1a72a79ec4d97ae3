"""Hugging Face GPT-2 weights in and out: the same logits as transformers' GPT2LMHeadModel.

    model = from_pretrained("gpt2", tie=False, dropout=0.1)   # or a local directory
    save_pretrained(model, "out/")   # readable by GPT2LMHeadModel.from_pretrained("out/")

HF's GPT-2 uses Conv1D layers, which store (in, out): those four weights are transposed.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from tiedvsuntied.model.config import SHAPE_KEYS, ModelConfig
from tiedvsuntied.model.gpt import GPT, LN_EPS

_CONV1D_WEIGHTS = ("c_attn.weight", "c_proj.weight", "c_fc.weight")  # attn's and mlp's c_proj
_SAME_NAMES = ("vocab_size", "n_layer", "n_head", "n_embd")  # in ModelConfig and config.json
_HF_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")  # causal masks in old checkpoints


def _pretrained_dir(path_or_name) -> Path:
    path = Path(path_or_name).expanduser()
    if path.is_dir():
        return path
    name = str(path_or_name)
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"{name}: not a directory with config.json + model.safetensors")
    try:
        from huggingface_hub import snapshot_download

        # safetensors (one file or shards with their index), else the original pytorch_model.bin;
        # a short metadata timeout: an unreachable Hub fails in seconds
        get = partial(snapshot_download, name, etag_timeout=5)
        directory = Path(get(allow_patterns=["config.json", "model*.safetensors*"]))
        if not any(directory.glob("*.safetensors")):
            directory = Path(get(allow_patterns=["config.json", "pytorch_model.bin"]))
        return directory
    except Exception as e:
        raise OSError(
            f"could not get {name!r} from the Hugging Face Hub ({type(e).__name__}: {e}); where "
            "it is unreachable, pass the local directory of a download instead (config.json + "
            f"model.safetensors or pytorch_model.bin): from_pretrained('/path/to/{name}')"
        ) from e


# config.json keys whose values this model cannot change: (key, GPT-2's default, supported)
_FIXED_KEYS = (
    ("model_type", "gpt2", ("gpt2",)),
    ("activation_function", "gelu_new", ("gelu_new", "gelu_pytorch_tanh")),
    ("layer_norm_epsilon", LN_EPS, (LN_EPS,)),
    ("scale_attn_weights", True, (True,)),
    ("scale_attn_by_inverse_layer_idx", False, (False,)),
    ("add_cross_attention", False, (False,)),
)


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    """The ModelConfig of a GPT-2 config.json; error on what this model can't do."""
    checks = [(key, hf.get(key, default), ok) for key, default, ok in _FIXED_KEYS]
    checks.append(("n_inner", hf.get("n_inner"), (None, 4 * hf["n_embd"])))
    for key, value, ok in checks:
        if value not in ok:
            raise ValueError(f"{source}: {key}={value!r} is not supported (supported: {list(ok)})")
    shapes = {k: hf[k] for k in _SAME_NAMES}
    return ModelConfig(name=source, block_size=hf["n_positions"], bias=True, **shapes)


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
    raise FileNotFoundError(f"{directory}: no model.safetensors(.index.json) or pytorch_model.bin")


def _state_dict_from_hf(hf_sd: dict) -> dict[str, torch.Tensor]:
    """HF GPT-2 names -> ours (prefix 'transformer.'), Conv1D (in, out) -> Linear (out, in)."""
    sd = {}
    for key, t in hf_sd.items():
        k = key.removeprefix("transformer.")
        if _HF_BUFFERS.fullmatch(k):
            continue  # not weights: the causal mask, which SDPA's is_causal replaces
        if k.endswith(_CONV1D_WEIGHTS):
            t = t.t()
        # any unknown key stays, so the strict load names it
        sd[k if k == "lm_head.weight" else "transformer." + k] = t
    return sd


def from_pretrained(path_or_name, tie: bool = True, **overrides) -> GPT:
    """GPT-2 weights in Hugging Face format: a local directory with config.json and
    model.safetensors (or pytorch_model.bin), or a Hub name such as "gpt2" where reachable.

    tie=False from a tied checkpoint starts the new head as a COPY of the embedding (a fresh
    head would be random). `overrides` set other ModelConfig fields (dropout, block_size
    <= n_positions crops wpe, ...); the shape fields come from the checkpoint."""
    directory = _pretrained_dir(path_or_name)
    hf = json.loads((directory / "config.json").read_text())
    cfg = config_from_hf(hf, source=str(path_or_name))
    for k, v in overrides.items():
        if k in SHAPE_KEYS and k != "block_size" and v != getattr(cfg, k):
            raise ValueError(f"{k}={v!r} conflicts with the checkpoint's {getattr(cfg, k)!r}")
    cfg = replace(cfg, **overrides)
    if cfg.block_size > hf["n_positions"]:
        raise ValueError(f"block_size={cfg.block_size} exceeds n_positions={hf['n_positions']}")

    sd = _state_dict_from_hf(_read_hf_weights(directory))
    sd["transformer.wpe.weight"] = sd["transformer.wpe.weight"][: cfg.block_size]
    wte, head = sd["transformer.wte.weight"], sd.get("lm_head.weight")
    if head is None:
        if not hf.get("tie_word_embeddings", True):
            raise ValueError(f"{directory}: tie_word_embeddings=false but no lm_head.weight")
        head = wte if tie else wte.clone()  # untie for fine-tuning: copy, never random
    elif tie and not torch.equal(head, wte):
        raise ValueError(f"{directory}: has its own lm_head.weight; load it with tie=False")
    sd["lm_head.weight"] = head

    with torch.device("meta"):  # every tensor is about to be loaded: skip the init
        model = GPT(cfg, tie=tie)
    missing, unexpected = model.to_empty(device="cpu").load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{directory}: weights do not fit this model: missing keys {sorted(missing)}, "
            f"unexpected keys {sorted(unexpected)}"
        )
    return model


def save_pretrained(model: GPT, directory) -> None:
    """Hugging Face GPT-2 format (config.json + model.safetensors), readable by
    from_pretrained and transformers' GPT2LMHeadModel.from_pretrained."""
    from safetensors.torch import save_file

    cfg = model.config
    if not cfg.bias or model.logit_scale != 1.0 or model.emb_scale != 1.0:
        raise ValueError(
            "GPT2LMHeadModel has biases and no logit or embedding scale: cannot export bias=false, "
            "head.t5_rescale=true, head.logit_scale or model.emb_scale != 1"
        )
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, t in model.state_dict().items():
        if k == "lm_head.weight" and model.tie:
            continue  # safetensors cannot store one tensor twice; HF re-ties from the config
        if k.endswith(_CONV1D_WEIGHTS):
            t = t.t()  # HF's Conv1D stores (in, out)
        tensors[k] = t.detach().to("cpu", torch.float32).contiguous()
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    hf = {
        "architectures": ["GPT2LMHeadModel"],
        **{key: default for key, default, _ in _FIXED_KEYS},
        **{k: getattr(cfg, k) for k in _SAME_NAMES},
        "n_positions": cfg.block_size,
        "n_ctx": cfg.block_size,
        "n_inner": None,
        **dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), cfg.dropout),
        "initializer_range": cfg.body_init_std,
        "tie_word_embeddings": model.tie,
        "reorder_and_upcast_attn": False,
        "torch_dtype": "float32",
    }
    if cfg.vocab_size > 50256:
        hf.update(bos_token_id=50256, eos_token_id=50256)  # GPT-2's <|endoftext|>
    (directory / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
