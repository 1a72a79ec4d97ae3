"""Fine-tuning: start from a finished run or Hugging Face GPT-2 (``init_from``), untie the head
the right way (``head.untie``), choose what trains (``finetune.trainable``).

The question users ask first: "to fine-tune GPT-2's lm_head, must I fine-tune wte too?" Tied,
the head IS the embedding: training "only the head" moves every embedding row, seen in the new
data or not. Untying must copy the embedding into the new head (the function is unchanged at
step 0); a fresh head is random, the broken default kept here as a control. What moved is
measured at every evaluation (probes.drift, and the start's own loss: retention).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from tiedvsuntied.model.config import (
    SHAPE_KEYS,
    HeadConfig,
    ModelConfig,
    ModelConfigError,
    Trainable,
    Untie,
)
from tiedvsuntied.model.gpt import GPT, set_trainable
from tiedvsuntied.results.records import Status, read_config, read_summary

log = logging.getLogger(__name__)
HEAD_SHAPE_KEYS = ("t5_rescale", "logit_scale")  # the head options a start's weights are for


@dataclass
class Start:
    """The model a fine-tuning run starts from."""

    source: str
    model: ModelConfig
    tie: bool  # as it ended (a run untied on schedule ended untied)
    data: dict | None  # a run of this harness: its data config (retention); Hugging Face: None
    weights: Path | None = None  # checkpoints/model.pt of a run; None: a Hugging Face directory
    head: HeadConfig = dataclasses.field(default_factory=HeadConfig)


def _run_dir(path: Path) -> Path | None:
    """A run directory, or the one finished run of a sweep directory; None if neither."""
    if (path / "config.yaml").is_file():
        return path
    finished = [
        p.parent
        for p in sorted(path.glob("*/summary.json"))
        if (s := read_summary(p.parent)) and s.status == Status.finished
    ]
    if len(finished) > 1:
        raise ModelConfigError(
            f"init_from={path} is a sweep with {len(finished)} finished runs: name one of "
            + ", ".join(p.name for p in finished)
        )
    return finished[0] if finished else None


def unreadable(weights: Path) -> str | None:
    """Why ``weights`` (a finished run's ``checkpoints/model.pt``) cannot be loaded, or None.
    Reads only the zip directory ``torch.save`` writes at the end of the file (a file cut short
    has none), so it costs nothing at any model size."""
    try:
        with zipfile.ZipFile(weights) as archive:
            if not any(name.endswith("/data.pkl") for name in archive.namelist()):
                return "not a file torch.save wrote"
    except (OSError, zipfile.BadZipFile) as e:
        return f"{type(e).__name__}: {e}"
    return None


def read_start(init_from: str) -> Start:
    """What ``init_from`` names, without loading its weights; one clear line if it cannot
    start a run."""
    path = Path(init_from).expanduser()
    if path.is_dir() and (run := _run_dir(path)) is not None:
        summary, weights = read_summary(run), run / "checkpoints" / "model.pt"
        if not summary or summary.status != Status.finished or not weights.is_file():
            raise ModelConfigError(
                f"init_from={run}: not a finished run (status "
                f"{summary.status.value if summary else 'unknown'}, checkpoints/model.pt "
                f"{'present' if weights.is_file() else 'missing'})"
            )
        if (why := unreadable(weights)) is not None:
            raise ModelConfigError(
                f"init_from={run}: {weights} does not load ({why}); run the command that "
                "trained it again (it trains a finished run whose model.pt is broken anew)"
            )
        cfg = read_config(run)
        model = {**cfg["model"], "vocab_size": cfg["derived"]["vocab_size"]}
        head = HeadConfig(**cfg.get("head", {}))
        tie = head.ends_tied(bool(cfg["tie"]))
        return Start(str(run), ModelConfig(**model), tie, cfg["data"], weights, head)
    if path.is_dir() and (path / "config.json").is_file():
        from tiedvsuntied.model.hf import config_from_hf

        hf = json.loads((path / "config.json").read_text())
        tie = bool(hf.get("tie_word_embeddings", True))
        return Start(str(path), config_from_hf(hf, str(path)), tie, None)
    raise ModelConfigError(
        f"init_from={init_from}: no finished run of this harness (config.yaml, "
        "checkpoints/model.pt) and no Hugging Face GPT-2 directory (config.json) there"
    )


def adopt(cfg, start: Start, overrides: list[str]):
    """A copy of the run's config with the start's shapes and tying; an override that
    contradicts the start is refused, as is untying an untied head. block_size may be given
    smaller than the start's (wpe is cropped)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    for node, keys in (("model", SHAPE_KEYS), ("head", HEAD_SHAPE_KEYS)):
        for key in keys:
            ours, theirs = getattr(getattr(cfg, node), key), getattr(getattr(start, node), key)
            if key == "vocab_size" or (key == "block_size" and ours < theirs):
                continue  # the tokenizer is checked with the data; a shorter block crops wpe
            if (node in given or f"{node}.{key}" in given) and ours != theirs:
                raise ModelConfigError(
                    f"{node}.{key}={ours} conflicts with init_from (its {key} is {theirs}): "
                    "the start's shapes are used; drop the override"
                )
    if "tie" in given and cfg.tie != start.tie:
        raise ModelConfigError(
            f"tie={str(cfg.tie).lower()} conflicts with init_from (tie={str(start.tie).lower()}): "
            "to untie a tied start use head.untie=copy"
        )
    if cfg.head.untie != Untie.keep and not start.tie:
        raise ModelConfigError(
            f"head.untie={Untie(cfg.head.untie).value} needs a tied start; init_from is "
            "untied: use head.untie=keep"
        )
    shapes = {k: getattr(start.model, k) for k in SHAPE_KEYS}
    if "model.block_size" in given:  # no larger than the start's (refused above): wpe is cropped
        shapes["block_size"] = cfg.model.block_size
    model = dataclasses.replace(cfg.model, **shapes, name=start.model.name)
    head = dataclasses.replace(cfg.head, **{k: getattr(start.head, k) for k in HEAD_SHAPE_KEYS})
    return dataclasses.replace(cfg, model=model, head=head, tie=start.tie)


def build(start: Start, cfg) -> GPT:
    """The start's model with the run's dropout, untied as asked, only ``trainable`` training."""
    run = {"dropout": cfg.model.dropout, "block_size": cfg.model.block_size}
    if start.weights is None:
        from tiedvsuntied.model.hf import from_pretrained

        model = from_pretrained(start.source, tie=start.tie, **run)
    else:
        with torch.device("meta"):  # every tensor is about to be loaded
            shapes = dataclasses.replace(start.model, **run)
            model = GPT(shapes, tie=start.tie, init_std=cfg.init_std, head=cfg.head)
        model.to_empty(device="cpu")
        sd = torch.load(start.weights, map_location="cpu", weights_only=True)["model"]
        sd["transformer.wpe.weight"] = sd["transformer.wpe.weight"][: cfg.model.block_size]
        model.load_state_dict(sd)
    model.init_seed = cfg.seed  # a fresh head is drawn as an untied model of this seed draws it
    model.untie(cfg.head.untie)
    counts = set_trainable(model, cfg.finetune.trainable)
    if model.tie and cfg.finetune.trainable in (Trainable.head, Trainable.embedding):
        log.warning(
            "finetune.trainable=%s on a tied model trains the one shared matrix: the embedding "
            "(and every token's row) moves too; head.untie=copy trains a separate head",
            cfg.finetune.trainable.value,
        )
    if counts["trainable"] == 0:
        raise ModelConfigError(
            f"finetune.trainable={cfg.finetune.trainable.value} leaves nothing to train"
        )
    return model


def start_rows(model: GPT) -> dict[str, torch.Tensor]:
    """The step-0 rows drift is measured from: E, and H when it is a matrix of its own."""
    rows = {"emb": model.transformer.wte.weight.detach().clone()}
    if not model.tie:
        rows["head"] = model.lm_head.weight.detach().clone()
    return rows
