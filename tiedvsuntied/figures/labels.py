"""Words for what a figure draws: the corpus of a set of runs (from its data config), an init
std that is d^-0.5 of another width than the runs' own, and a table's p-values."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path, PurePath

import pandas as pd

from tiedvsuntied.model.config import init_std_note
from tiedvsuntied.results.records import read_config

# Corpora known by a name a reader recognises, found in the data config's files / path / config
# (lower case, without - and _)
KNOWN_CORPORA = {
    "tinyshakespeare": "Tiny Shakespeare",
    "wikitext103": "WikiText-103",
    "wikitext2": "WikiText-2",
    "openwebtext": "OpenWebText",
    "fineweb": "FineWeb",
    "gutenberg": "Project Gutenberg books",
}
GENERIC_STEMS = {"input", "train", "data", "text", "corpus", "all"}  # say the folder instead
ENCODINGS = {"gpt2": "GPT-2 tokens", "bytes": "bytes", "r50k_base": "GPT-2 tokens"}


@functools.lru_cache(maxsize=256)
def _data_section(run_dir: str) -> tuple:
    """The data section of a run directory's config.yaml as sorted items (cached: one read)."""
    data = read_config(Path(run_dir)).get("data")
    return tuple(sorted(data.items(), key=str)) if isinstance(data, dict) else ()


def _corpus_name(data: dict) -> str | None:
    """'Tiny Shakespeare' from data.files / data.path / data.config, else the file's name."""
    files = data.get("files")
    files = list(files.values()) if isinstance(files, dict) else files
    files = [files] if isinstance(files, str) else list(files or [])
    where = " ".join(str(v) for v in [*files, data.get("path"), data.get("config")] if v)
    for key, name in KNOWN_CORPORA.items():
        if key in re.sub("[-_]", "", where.lower()):
            return name
    if not files:
        return str(data.get("path") or "") or None
    path = PurePath(str(files[0]))
    generic = path.stem.lower() in GENERIC_STEMS and path.parent.name
    return path.parent.name if generic else path.stem


def corpus_label(run: pd.Series) -> str:
    """One run's corpus: 'Tiny Shakespeare (text, GPT-2 tokens)' from its config.yaml (a sweep
    or a bundle); from the runs table alone (W&B, no config): 'data text (146434f969b1)'."""
    data = dict(_data_section(str(run.get("path")))) if run.get("path") else {}
    config_name = data.get("name") or run.get("data")
    name = _corpus_name(data) if data else None
    if name is None:
        return f"data {config_name or '?'} ({run.get('data_id') or 'no data_id'})"
    encoding = data.get("encoding")
    parts = [str(config_name)] if config_name else []
    parts += [ENCODINGS.get(str(encoding), f"{encoding} tokens")] if encoding else []
    if str(data.get("vocab", "full")) != "full":
        parts.append("closed vocabulary")
    if data.get("split") == "document":  # held out whole: say by what
        parts.append(f"split by {data.get('group_by') or 'document'}")
    return f"{name} ({', '.join(parts)})" if parts else name


def corpora(runs: pd.DataFrame) -> str:
    """Every corpus among ``runs`` (one label per data_id), joined."""
    if runs.empty:
        return "no runs"
    firsts = runs.sort_values("path", na_position="last").groupby("data_id", dropna=False).head(1)
    return "; ".join(dict.fromkeys(corpus_label(run) for _, run in firsts.iterrows()))


def init_std_aside(init_std, widths: Iterable, sep: str = "; ") -> str:
    """For an init std that is d^-0.5 of another width than ``widths`` (model.config.init_std_note:
    0.036 at d = 128): ' (d^-1/2 at d=768; here d^-1/2 = 0.088)' in mathtext; else ''."""
    widths = sorted({int(w) for w in widths if pd.notna(w)})
    try:
        notes = " ".join(init_std_note(init_std, w) or "" for w in widths)
    except (TypeError, ValueError):  # not an init std (a hand-made table's "?")
        return ""
    if not (others := [int(d) for d in re.findall(r"d\^-0\.5 at d=(\d+)", notes)]):
        return ""
    here = ", ".join(f"{w**-0.5:.2g}" for w in widths)
    return f" ($d^{{-1/2}}$ at d={min(others)}{sep}here $d^{{-1/2}}$ = {here})"


def p_text(table: pd.DataFrame) -> pd.DataFrame:
    """The p-value columns (p, p_holm) as two significant figures (a rounded 0.0000 reads as 0)."""
    columns = [c for c in ("p", "p_holm") if c in table]
    return table.assign(
        **{c: table[c].map(lambda p: f"{p:.2g}" if pd.notna(p) else "") for c in columns}
    )
