"""``python -m tiedvsuntied.sweep dashboard DIR``: the sweep's W&B view, made by code with
``wandb-workspaces``: its runs (the sweep's W&B group) grouped by tie × init std × size, a
section each for the losses, the gradient split, the embedding probes and throughput. Each panel
names only metrics the sweep's runs log (read from their ``metrics.jsonl``, which W&B mirrors
under the same names). Online it saves the view; offline it says the one command to run after
``wandb sync``. No torch."""

from __future__ import annotations

from pathlib import Path

from tiedvsuntied.results.metrics import (
    PROBE_,
    TEST_LOSS,
    TRAIN_CLIP_FRAC,
    TRAIN_GRAD_NORM,
    TRAIN_GRAD_NORM_IN,
    TRAIN_GRAD_NORM_OUT,
    TRAIN_LOSS,
    TRAIN_MFU,
    TRAIN_TOKENS_PER_S,
    VAL_LOSS,
    VAL_PPL,
)
from tiedvsuntied.results.records import read_config, read_metrics, read_summary
from tiedvsuntied.sweep.jobs import SweepError

GROUP_BY = ["tie", "init_std", "model.name"]  # W&B's config keys: the resolved config
# section -> its panels: (title, the metric names, or a prefix ending in "/" for all of them)
SECTIONS = {
    "losses": [("loss", [TRAIN_LOSS, VAL_LOSS, TEST_LOSS]), ("perplexity", [VAL_PPL])],
    "gradient split": [
        (
            "embedding gradient: lookup (in) vs head (out)",
            [TRAIN_GRAD_NORM_IN, TRAIN_GRAD_NORM_OUT],
        ),
        ("gradient norm", [TRAIN_GRAD_NORM, TRAIN_CLIP_FRAC]),
    ],
    "embedding probes": [("probes", [PROBE_])],
    "throughput": [("tokens per second", [TRAIN_TOKENS_PER_S]), ("MFU", [TRAIN_MFU])],
}


def logged_metrics(sweep_dir: Path) -> set[str]:
    """Every metric name a run of the sweep logged."""
    runs = [p.parent for p in Path(sweep_dir).glob("*/metrics.jsonl")]
    return {k for run in runs for line in read_metrics(run) for k in line} - {"step"}


def where(sweep_dir: Path) -> tuple[str | None, str, str, bool]:
    """(entity, project, group, any run online) as the sweep's runs were logged."""
    runs = sorted(p.parent for p in Path(sweep_dir).glob("*/summary.json"))
    config = read_config(runs[0]).get("wandb", {}) if runs else {}
    online = any((s := read_summary(r)) and s.wandb_mode == "online" for r in runs)
    group = config.get("group") or Path(sweep_dir).name
    return config.get("entity"), config.get("project") or "tiedvsuntied", group, online


def view(sweep_dir: Path, entity: str, project: str, group: str):
    """The saved view (a ``wandb_workspaces`` Workspace), built without a server."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    logged = logged_metrics(sweep_dir)
    sections = []
    for name, panels in SECTIONS.items():
        plots = []
        for title, wanted in panels:
            ys = sorted(
                m
                for w in wanted
                for m in logged
                if (m.startswith(w) if w.endswith("/") else m == w)
            )
            if ys:
                plots.append(wr.LinePlot(title=title, x="Step", y=ys))
        if plots:
            sections.append(ws.Section(name=name, panels=plots, is_open=True))
    runset = ws.RunsetSettings(
        filters=[ws.Metric("Group") == group], groupby=[ws.Config(k) for k in GROUP_BY]
    )
    return ws.Workspace(
        entity=entity,
        project=project,
        name=f"{group}: tied vs untied",
        sections=sections,
        runset_settings=runset,
    )


def dashboard(sweep_dir: Path, entity: str | None = None) -> str:
    """Save the view where the runs are online; else the command to run once they are synced."""
    found, project, group, online = where(sweep_dir)
    if entity is None and not (online and found):  # --entity: the runs were synced since
        sync = f"wandb sync {sweep_dir}/*/wandb/offline-run-*"
        again = f"python -m tiedvsuntied.sweep dashboard {sweep_dir} --entity ENTITY"
        why = "no W&B entity is known" if online else "the runs were logged offline"
        return f"{why}: after `{sync}`, run: {again}"
    import wandb.errors

    entity = entity or found
    saved = view(sweep_dir, entity, project, group)
    try:
        saved.save()
    except (wandb.errors.UsageError, wandb.errors.CommError) as e:  # no key; no server
        why = " ".join(str(e).split())
        raise SweepError(
            f"--entity {entity}: the W&B view of {sweep_dir} was not saved ({why}): log in "
            "(wandb login, or WANDB_API_KEY) where the W&B server can be reached, then rerun"
        ) from None
    return f"saved the W&B view {saved.name!r}: {saved.url}"
