"""``python -m tiedvsuntied.run``: the Hydra entry point. Thin on purpose.

    python -m tiedvsuntied.run -m tie=true,false init_std=1.0,0.036

Each job converts its config to the typed ``Config`` and calls ``train.train``; everything
that matters happens there. A callback prints the sweep's runs at the end of a multirun.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tiedvsuntied.config import register_configs
from tiedvsuntied.tracking import read_json

register_configs()


def format_runs_table(sweep_dir: Path, since: Optional[float] = None) -> str:
    """A small table of a sweep's runs (status, parameters, losses) from their summaries."""
    index = read_json(sweep_dir / "index.json")
    if index is None:
        return f"(no runs recorded in {sweep_dir})"
    rows = []
    for run_id, entry in sorted(index.items()):
        summary = read_json(sweep_dir / entry.get("path", run_id) / "summary.json") or {}
        updated = entry.get("updated_at") or summary.get("updated_at") or ""  # the index is touched by skips too
        if since is not None:
            try:
                if time.mktime(time.strptime(updated[:19], "%Y-%m-%dT%H:%M:%S")) < since - 1:
                    continue
            except ValueError:
                pass

        def fmt(v: Any) -> str:
            return f"{v:.4f}" if isinstance(v, (int, float)) else "-"

        params = (summary.get("params") or {}).get("total")
        rows.append((entry.get("name", run_id), summary.get("status", entry.get("status", "?")),
                     f"{params:,}" if isinstance(params, int) else "-", fmt(summary.get("init_val_loss")),
                     fmt(summary.get("final_val_loss")), fmt(summary.get("test_loss"))))
    if not rows:
        return f"(no runs of this invocation in {sweep_dir})"
    header = ("run", "status", "params", "init val", "final val", "test")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])


class SweepTable(Callback):
    """Prints the table of this multirun's runs when it ends (also after failures)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.t0 = time.time()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.results_dir) / config.sweep
        print(f"\nSweep {config.sweep}: {sweep_dir.resolve()}\n{format_runs_table(sweep_dir, getattr(self, 't0', None))}",
              flush=True)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Optional[float]:
    from tiedvsuntied.train import train

    overrides = list(HydraConfig.get().overrides.task)
    summary = train(OmegaConf.to_object(cfg), overrides=overrides)
    return summary.get("final_val_loss")  # for sweepers that optimise


if __name__ == "__main__":
    main()
