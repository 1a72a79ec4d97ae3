"""The third edition's own pieces beside the protocol's: the ends' arms, GPT-2's 0.02 pair, each
arm's own embedding x head multipliers at V = 8,192 (the multiplier rule) and the pieces that
read it, what is left once every point's seeds ran, the fp32 pairs (HYPOTHESES.md).

The multiplier rule: untied over ``emb_lr_mult`` x ``head_lr_mult`` in {1, 4, 16}^2, tied over
its one matrix's ``tied_lr_mult`` in {1, 4, 16}, each at its chosen lr, seed 0; (4, 4), the one
shared multiplier, is the lr check's own run. An arm moves to its best pair at every point when
that pair is ahead of the shared one by more than the seed sd (the sd over seeds of tied -
untied's paired validation bpb at this point): so the verdict waits for the point's seeds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import ResultsError, load_results
from tiedvsuntied.study import protocol
from tiedvsuntied.study.declare import Study

# V -> bytes per token of fold 0's training split at the micro body
V_LADDER = {1024: 2.5456, 2048: 2.9437, 4096: 3.3047, 8192: 3.6258, 16384: 3.8908, 40960: 4.1324}
ENDS = ("v1024", "v40960")  # the V-ladder's two ends
# where an arm runs at its own multipliers: the ends and the grid's own point; the other six
# points are cut (README.md, "Limits": over budget, on slower CPUs)
OWN_POINTS = ("v1024", "v8192", "v40960")
MULT_POINT = "v8192"  # the multiplier grid's point
MULTS = [1.0, 4.0, 16.0]  # emb_lr_mult and head_lr_mult each
SHARED = (4.0, 4.0)  # the study's optim.emb_lr_mult, which the head shares by default
SEEDS = 4  # the point's seeds, of which the seed sd is taken
MULT2D = "sweep=sign_flip_mult2d"


def lr_of(study: Study, point: str, arm: str) -> str | None:
    return protocol.value_at(study, point, arm, "inv_sqrt_d") or None


def need(lr: str | None, point: str) -> str:
    if lr is None:
        raise protocol.StudyError(f"run the lr check of {point} first")
    return lr


def ends(study: Study, point=None, results=None) -> list[str]:
    """The remedy (tied_in_grad) and the init-1.0 pair at the two ends, at tied's lr; init_std
    on the command line: the experiment's sweep params put +arm before +experiment, whose
    init_std (d^-0.5) would win over the arm's 1.0."""
    out = []
    for p in ENDS:
        lr = need(lr_of(study, p, "tied"), p)
        out.append(protocol.command(study, p, "tied_in_grad", lr, "seed=0,1,2,3"))
        out.append(
            protocol.command(study, p, "t5,emb1_head_dsqrt", lr, "seed=0,1,2,3", init_std="1.0")
        )
    return out


def init02(study: Study, point: str, results=None) -> list[str]:
    """GPT-2's 0.02 pair: the lr check at init 0.02."""
    return [
        protocol.command(study, point, a, study.grid, "seed=0", init_std="0.02")
        for a in ("tied", "untied")
    ]


def mults(arm: str, emb: float, head: float) -> str:
    """An arm's multiplier overrides (tied: its one matrix's)."""
    if arm == "tied":
        return f"optim.tied_lr_mult={head:g}"
    return f"optim.emb_lr_mult={emb:g} optim.head_lr_mult={head:g}"


def mult2d(study: Study, point=None, results=None) -> list[str]:
    """The multiplier grid at V = 8,192, seed 0, each arm at its lr, in a sweep of its own."""
    untied = need(lr_of(study, MULT_POINT, "untied"), MULT_POINT)
    tied = need(lr_of(study, MULT_POINT, "tied"), MULT_POINT)
    run = {"before": MULT2D}
    return [
        protocol.command(
            study,
            MULT_POINT,
            "untied",
            untied,
            "seed=0",
            after="optim.emb_lr_mult=1,16 optim.head_lr_mult=1,4,16",
            **run,
        ),
        protocol.command(
            study,
            MULT_POINT,
            "untied",
            untied,
            "seed=0",
            after="optim.emb_lr_mult=4 optim.head_lr_mult=1,16",
            **run,
        ),
        protocol.command(
            study, MULT_POINT, "tied", tied, "seed=0", after="optim.tied_lr_mult=1,16", **run
        ),
    ]


def mult2d_edge(study: Study, point=None, results: Path | None = None) -> list[str]:
    """x2 beyond a multiplier of an arm's best pair at an edge of what ran."""
    return [
        protocol.command(
            study,
            MULT_POINT,
            name,
            lr_of(study, MULT_POINT, name),
            "seed=0",
            before=MULT2D,
            after=mults(name, emb, head),
        )
        for name, rule in rules(study, results).items()
        for emb, head in rule["run_next"]
    ]


def own(study: Study, point: str, results: Path | None = None, verdicts=None) -> list[str]:
    """An arm the multiplier rule moved, at its own pair: seeds 0-3 at its lr at ``point``."""
    out = []
    for name, rule in (verdicts if verdicts is not None else rules(study, results)).items():
        lr = lr_of(study, point, name)
        if rule["moves"] and lr:  # no lr: the point's lr check has not chosen it yet
            after = mults(name, *rule["best"])
            out.append(protocol.command(study, point, name, lr, "seed=0,1,2,3", after=after))
    return out


def rest(study: Study, point=None, results: Path | None = None) -> list[str]:
    """What is left once every point's seeds ran: the own multipliers (V = 8,192's first: the
    shortest), then the ends' arms (HYPOTHESES.md cuts them first), a seed a command, once each."""
    verdicts = rules(study, results)
    lines = own(study, MULT_POINT, results, verdicts)
    lines += [c for p in OWN_POINTS for c in own(study, p, results, verdicts)] + ends(study)
    return list(dict.fromkeys(c for line in lines for c in per_seed(line)))


def per_seed(line: str) -> list[str]:
    """A command over seeds a,b,... as one command per seed (so that two run at once)."""
    words = line.split(" ")
    at = next((i for i, w in enumerate(words) if w.startswith("seed=") and "," in w), None)
    if at is None:
        return [line]
    return [
        " ".join([*words[:at], f"seed={s}", *words[at + 1 :]])
        for s in words[at].removeprefix("seed=").split(",")
    ]


def precision(study: Study, point=None, results=None) -> list[str]:
    """The seed-0 pairs of V = 40,960 and 8,192 in fp32: what precision moves."""
    seed = "seed=0 sweep=sign_flip_fp32 trainer.precision=fp32"
    return [c for p in ("v40960", "v8192") for c in protocol.seeds(study, p, seed)]


# ----------------------------------------------------------------------------- the rule
def rules(study: Study, results: Path | None) -> dict[str, dict]:
    """Each arm's verdict from the multiplier grid's sweeps (none before its lr is chosen)."""
    return {name: rule for name, (_, rule) in grids(study, results).items()}


def grids(study: Study, results: Path | None) -> dict[str, tuple[pd.DataFrame, dict]]:
    """Each arm's grid (:func:`grid`) and verdict, from the sweeps sign_flip_mult2d and
    sign_flip of ``results``: none before both arms' lr at V = 8,192 is chosen."""
    lrs = {arm == "tied": lr_of(study, MULT_POINT, arm) for arm in ("tied", "untied")}
    results = results or protocol.study_root() / "results"
    sweeps = [results / "sign_flip_mult2d", results / "sign_flip"]
    if not all(lrs.values()):
        return {}
    lrs = {tie: float(lr) for tie, lr in lrs.items()}
    try:
        runs = runs_of(tuple(s for s in sweeps if s.is_dir()))
    except ResultsError:
        return {}
    sd, n = seed_sd(runs, lrs)
    tables = {name: grid(runs, lrs[tie], tie) for tie, name in ((False, "untied"), (True, "tied"))}
    return {name: (table, verdict(table, sd, n)) for name, table in tables.items()}


_LOADED: dict[tuple, pd.DataFrame] = {}


def runs_of(sweeps: tuple[Path, ...]) -> pd.DataFrame:
    """The sweeps' runs table, loaded once per process while no run's summary changes (a piece
    and ``print all`` read the grid several times; loading it reads every run's history)."""
    key = tuple(
        (s, *sorted((p.parent.name, p.stat().st_mtime_ns) for p in s.glob("*/summary.json")))
        for s in sweeps
    )
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = load_results(*sweeps).runs
    return _LOADED[key]


def mult2d_table(study: Study, point=None, results: Path | None = None) -> list[str]:
    """The multiplier grids and the rule's verdict per arm, as a report; writes mult2d.tsv (each
    pair's validation bpb and how far it is ahead of the shared pair)."""
    found = grids(study, results)
    lines = []
    for name, (table, rule) in found.items():
        lines.append(f"{name}, seed 0: validation bpb, emb x head mult")
        lines.append(table.round(4).to_string())
        lines.append(
            ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rule.items()
            )
        )
    if found:
        out = pd.concat(
            t.stack(future_stack=True)
            .rename("val_bpb")
            .reset_index()
            .assign(arm=name, ahead_of_shared=lambda d, t=t: t.loc[SHARED] - d["val_bpb"])
            for name, (t, _) in found.items()
        )
        out.to_csv(study.home / "mult2d.tsv", sep="\t", index=False)
        lines.append(f"written: {study.home / 'mult2d.tsv'}")
    return lines


def at_point(runs: pd.DataFrame) -> pd.DataFrame:
    """The point's finished runs of replicate 0."""
    done = runs["status"].eq("finished") & runs["replicate"].eq(0)
    mine = runs["model"].eq("micro") & runs["vocab_size"].eq(8192)
    return runs[done & mine & runs["init_std"].eq("inv_sqrt_d")]


def grid(runs: pd.DataFrame, lr: float, tie: bool = False) -> pd.DataFrame:
    """Seed 0's validation bpb of an arm at ``lr``: emb_lr_mult rows x head_lr_mult columns (the
    output matrix's multiplier: tied's one matrix has the one row of the study's emb_lr_mult),
    over the first grid and any multiplier beyond its edges that ran."""
    arm = at_point(runs).query("tie == @tie and seed == 0 and lr == @lr")
    table = arm.pivot_table(
        index="emb_lr_mult", columns="head_lr_mult", values="val_bpb", aggfunc="min"
    )
    rows = [SHARED[0]] if tie else sorted({*MULTS, *table.index})
    return table.reindex(index=rows, columns=sorted({*MULTS, *table.columns}))


def seed_sd(runs: pd.DataFrame, lrs: dict[bool, float]) -> tuple[float, int]:
    """The sd over seeds of tied - untied's validation bpb, each arm at its chosen lr (``lrs``:
    tie -> lr) and the shared multiplier, and how many seeds it pairs."""
    runs = at_point(runs)
    shared = runs["emb_lr_mult"].eq(SHARED[0]) & runs["head_lr_mult"].eq(SHARED[1])
    arms = runs[shared & runs["lr"].eq(runs["tie"].map(lrs))]
    wide = arms.pivot_table(index="seed", columns="tie", values="val_bpb", aggfunc="min")
    diff = (wide.get(True) - wide.get(False)).dropna() if len(wide.columns) == 2 else pd.Series()
    return float(diff.std()), len(diff)


def verdict(table: pd.DataFrame, sd: float, seeds: int) -> dict:
    """The best pair, its gain over the shared one, ``run_next`` (x2 beyond each of its
    multipliers at an edge of what ran, once the first grid has run whole), and whether the arm
    moves to it: None until the first grid, the edges and the point's seeds are all in."""
    ran = table.stack()
    if ran.empty:
        return {"best": None, "gain_over_shared": float("nan"), "run_next": [], "moves": None}
    best = tuple(float(m) for m in ran.idxmin())
    first = table.reindex(index=[m for m in MULTS if m in table.index], columns=MULTS)
    whole = first.notna().all().all()
    run_next = beyond_edges(ran.index, best) if whole else []
    gain = table.loc[SHARED] - ran[best]
    ready = whole and not run_next and seeds >= SEEDS
    return {
        "best": best,
        "gain_over_shared": gain,
        "seed_sd": sd,
        "seeds": seeds,
        "run_next": run_next,
        "moves": bool(gain > sd) if ready else None,
    }


def beyond_edges(ran: pd.MultiIndex, best: tuple[float, float]) -> list[tuple[float, float]]:
    """x2 beyond each multiplier of ``best`` that sits at an edge of what ran (a multiplier that
    ran at one value has no edge), the other kept: the lr check's rule for the multipliers."""
    out = []
    for level, value in enumerate(best):
        values = ran.get_level_values(level)
        step = 0.5 if value == values.min() else 2.0 if value == values.max() else None
        if values.nunique() > 1 and step:
            out.append(tuple(value * step if i == level else m for i, m in enumerate(best)))
    return out
