"""Which code ran a study's runs, from their records, not from memory:
``python -m tiedvsuntied.analysis.provenance DIR [--claim SHA]`` prints the statements a study
README quotes.

It counts records, not run ids: each directory given is read on its own, so a run id found in two
bundles (the same config trained twice) counts twice and is named in one line.

A run records the commit of the checkout that ran it and whether its code differed
(``summary.git_commit``, ``git_dirty``: its last start), and each start's (``summary.starts``:
a run resumed on other code says so), and the processor it ran on (``hardware``). Runs from
before that record existed are counted by their start time against each commit a README claims
ran them (``--claim SHA``): a run that started before a commit existed did not run it. Reads
only; no torch.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tiedvsuntied.analysis.load import load


def commit_times(repo: str, shas: list[str]) -> pd.Series:
    """Commit time (UTC) by sha, from ``git show`` of the checkout at ``repo``."""
    out = {}
    for sha in shas:
        shown = subprocess.run(
            ["git", "-C", repo, "show", "-s", "--format=%H %ct", sha],
            capture_output=True,
            text=True,
            check=True,
        )
        full, time = shown.stdout.split()
        out[full] = pd.Timestamp(int(time), unit="s", tz="UTC")
    return pd.Series(out, dtype="datetime64[ns, UTC]")


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def records(dirs: list[str]) -> pd.DataFrame:
    """The runs table of every record in ``dirs``, each directory read on its own (``load``
    keeps one record per run id across the directories it reads), with the ``bundle`` it is in
    (its last two path parts: ``<study>/results_clip``)."""
    return pd.concat(
        [load([d]).runs.assign(bundle="/".join(Path(d).resolve().parts[-2:])) for d in dirs],
        ignore_index=True,
    )


def doubled(runs: pd.DataFrame) -> list[str]:
    """One line per run id found in more than one bundle: which, and the precision of each."""
    if "bundle" not in runs:
        return []
    twice = runs[runs.duplicated("run_id", keep=False)]
    precision = twice.get("precision", pd.Series(index=twice.index, dtype=object))
    twice = twice.assign(precision=precision.fillna("unrecorded precision"))
    return [
        f"- run id {run_id} is in {len(group)} bundles: "
        + ", ".join(f"{b} ({p})" for b, p in zip(group["bundle"], group["precision"], strict=True))
        for run_id, group in twice.groupby("run_id")
    ]


def recorded(runs: pd.DataFrame) -> list[str]:
    """One line per (commit, dirty) the runs recorded."""
    has = runs[runs["git_commit"].notna()] if "git_commit" in runs else runs.iloc[:0]
    if has.empty:
        return []
    lines = []
    for (sha, dirty), group in has.groupby(["git_commit", "git_dirty"], dropna=False):
        state = "with uncommitted changes" if dirty is True else "clean"
        lines.append(
            f"- {_runs(len(group))} from commit {sha[:7]} ({state}), first started "
            f"{group.started.min():%Y-%m-%d %H:%M} to {group.started.max():%Y-%m-%d %H:%M} UTC"
        )
    return lines


def resumed(runs: pd.DataFrame) -> list[str]:
    """Runs whose starts (``code_starts``, "commit@step ...") ran more than one code: per path of
    commits, how many runs took it and the steps each commit took over at."""
    by_path: dict[tuple, list[list]] = {}
    for text in runs["code_starts"].dropna() if "code_starts" in runs else []:
        starts = [start.rsplit("@", 1) for start in text.split()]
        path = tuple(dict.fromkeys(sha for sha, _ in starts))
        if len(path) > 1:
            by_path.setdefault(path, []).append(starts)
    return [
        f"- {_runs(len(group))} {'was' if len(group) == 1 else 'were'} resumed on other code: "
        + ", then ".join(_took_over(sha, group) for sha in path)
        for path, group in by_path.items()
    ]


def _took_over(sha: str, group: list[list]) -> str:
    """ "commit abc1234 from steps 555–568": a commit of a path and the steps it started at."""
    steps = [int(step) for starts in group for s, step in starts if s == sha]
    what = "unrecorded code" if sha == "?" else f"commit {sha.rstrip('*')}"
    dirty = " (with uncommitted changes)" if sha.endswith("*") else ""
    span = f"step {steps[0]}" if min(steps) == max(steps) else f"steps {min(steps)}–{max(steps)}"
    return f"{what}{dirty} from {span}"


def unrecorded(runs: pd.DataFrame, claims: pd.Series) -> list[str]:
    """Runs without a recorded commit: their count and span, and against each commit a README
    claims ran them (``claims``: commit time by sha), how many started before it existed."""
    old = runs[runs["git_commit"].isna()] if "git_commit" in runs else runs
    if old.empty:
        return []
    lines = [
        f"- {_runs(len(old))} record no commit (they predate the record), started "
        f"{old.started.min():%Y-%m-%d %H:%M} to {old.started.max():%Y-%m-%d %H:%M} UTC"
    ]
    for sha, time in claims.items():
        before = int((old["started"] < time).sum())
        lines.append(
            f"- commit {sha[:7]} ({time:%Y-%m-%d %H:%M} UTC): {before} of them started before it "
            f"existed, {len(old) - before} after"
        )
    return lines


def hardware(runs: pd.DataFrame) -> list[str]:
    """One line per processor the runs' last starts computed on (``summary.hardware``) and the
    precision they trained in: a run's numbers differ between them (``trainer.precision=auto``
    trains fp32 on a CPU without bf16 units), so a reader can tell which ran on which."""
    precision = runs.get("precision", pd.Series(index=runs.index, dtype=object))
    runs = runs.assign(
        hardware=runs.get("hardware"), precision=precision.fillna("unrecorded precision")
    )
    known = runs["hardware"].notna()
    lines = [
        f"- {_runs(len(group))} on {name}, in {precision}, started "
        f"{group.started.min():%Y-%m-%d %H:%M} to {group.started.max():%Y-%m-%d %H:%M} UTC"
        for (name, precision), group in runs[known].groupby(["hardware", "precision"])
    ]
    if not known.all():
        old = runs[~known]
        lines.append(
            f"- {_runs(len(old))} {'records' if len(old) == 1 else 'record'} no processor "
            f"(from before the record; {_counts(old['precision'])}), started "
            f"{old.started.min():%Y-%m-%d %H:%M} to {old.started.max():%Y-%m-%d %H:%M} UTC"
        )
    return lines


def _counts(values: pd.Series) -> str:
    """ "161 in bf16, 2 in fp32": how many of ``values`` take each value."""
    return ", ".join(f"{n} in {value}" for value, n in values.value_counts().sort_index().items())


def order(runs: pd.DataFrame) -> list[str]:
    """The order the runs started in, by sweep, model, replicate and seed 0 or not (a study's
    pieces: its lr check, its seeds, a sweep of its own such as a multiplier grid)."""
    pieces = runs.assign(seeds=runs["seed"].map(lambda s: "seed 0" if s == 0 else "seeds 1+"))
    keys = ["sweep", "model", "replicate", "seeds"]
    spans = pieces.groupby(keys)["started"].agg(["min", "max", "size"]).sort_values("min")
    return [
        f"{i}. {sweep}, {model}, replicate {rep}, {seeds}: {_runs(row['size'])}, "
        f"{row['min']:%m-%d %H:%M} to {row['max']:%m-%d %H:%M} UTC"
        for i, ((sweep, model, rep, seeds), row) in enumerate(spans.iterrows(), 1)
    ]


def costs(runs: pd.DataFrame) -> list[str]:
    """What the runs cost, per sweep, model, V and run length (a study's text budgets) in the
    order they started, and in all: wall hours, core-hours (wall × threads: an upper bound where
    the machine was shared) and CPU hours (``cpu_s``, the processes' own, over the runs that
    counted every start)."""
    runs = runs.assign(core_s=runs["wall_time_s"] * runs["threads"].fillna(1))
    keys = ["sweep", "model", "vocab_size", "max_steps"]
    groups = runs.reindex(columns=runs.columns.union(keys, sort=False))
    groups = groups.groupby(keys, dropna=False, sort=False)
    lines = []
    for key in groups["started"].min().sort_values().index:
        lines.append(_cost(_cost_label(*key), groups.get_group(key), per_token=True))
    return [*lines, _cost("all", runs, per_token=False)]


def _cost_label(sweep: str, model: str, v: float, steps: float) -> str:
    vocab = "?" if pd.isna(v) else f"{int(v):,}"
    return f"{sweep}, {model}, V = {vocab}" + ("" if pd.isna(steps) else f", {int(steps):,} steps")


def _cost(what: str, runs: pd.DataFrame, per_token: bool) -> str:
    """One cost line; ``per_token``: with its CPU seconds per million tokens (one body's runs:
    over several bodies the range says nothing)."""
    hours = runs[["wall_time_s", "core_s", "cpu_time_s"]].sum() / 3600
    counted = int(runs["cpu_time_s"].notna().sum())
    cpu = f"{hours.cpu_time_s:.1f} CPU hours over the {counted} that counted theirs"
    cpu += (_rate(runs) if per_token else "") + _mfu(runs)
    return (
        f"- {what}: {_runs(len(runs))}, {hours.wall_time_s:.1f} h of wall time, "
        f"{hours.core_s:.1f} core-hours, {cpu if counted else 'no CPU seconds recorded'}"
    )


def _rate(runs: pd.DataFrame) -> str:
    """CPU seconds per million tokens, the range over the runs that counted both: what a run of
    another length costs, the same body, V and machine."""
    have = runs.reindex(columns=["cpu_time_s", "tokens"]).apply(pd.to_numeric, errors="coerce")
    rate = (have["cpu_time_s"] / have["tokens"] * 1e6).dropna()
    if rate.empty:
        return ""
    low, high = f"{rate.min():,.0f}", f"{rate.max():,.0f}"
    return f", {low if low == high else f'{low}–{high}'} CPU-s per million tokens"


MFU_KEYS = ["tokens", "flops_per_token", "cpu_time_s", "peak_tflops"]


def _mfu(runs: pd.DataFrame) -> str:
    """A cost line's MFU: the model FLOPs the runs did over what their CPU seconds could do at
    each run's own measured peak (sum of tokens × FLOPs per token ÷ sum of CPU seconds × peak,
    over the runs that recorded all four), as issue 55 defines an edition's, with the peaks'
    range (timed at each start, beside whatever else ran: the MFU moves with them); "" where
    none did."""
    have = runs.reindex(columns=MFU_KEYS).apply(pd.to_numeric, errors="coerce").dropna()
    if have.empty:
        return ""
    done = (have["tokens"] * have["flops_per_token"]).sum()
    could = (have["cpu_time_s"] * have["peak_tflops"]).sum() * 1e12
    low, high = have["peak_tflops"].min(), have["peak_tflops"].max()
    peaks = f"peak {low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"peaks {low:.2f}–{high:.2f}"
    return f", MFU {done / could:.0%} ({peaks} TFLOP/s)"


def statements(runs: pd.DataFrame, claims: pd.Series | None = None) -> str:
    runs = runs.assign(started=pd.to_datetime(runs["started_at"], utc=True))
    return "\n".join(
        [
            f"Provenance of {len(runs)} run record{'' if len(runs) == 1 else 's'} "
            "(generated from them):",
            *doubled(runs),
            *recorded(runs),
            *resumed(runs),
            *unrecorded(runs, pd.Series() if claims is None else claims),
            "",
            "What they ran on (each run's last start):",
            *hardware(runs),
            "",
            "Order in which they started:",
            *order(runs),
            "",
            "What they cost (wall time × threads: core-hours, an upper bound on a shared machine;"
            " CPU hours: the processes' own, where every start counted them; MFU: model FLOPs"
            " ÷ (CPU seconds × each run's measured peak)):",
            *costs(runs),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tiedvsuntied.analysis.provenance")
    parser.add_argument("dirs", nargs="+", help="sweep folders or results bundles")
    parser.add_argument("--claim", nargs="*", default=[], help="commits a README says ran them")
    parser.add_argument("--repo", default=".", help="the git checkout that holds those commits")
    args = parser.parse_args(argv)
    runs = records(args.dirs)
    print(statements(runs, commit_times(args.repo, args.claim)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
