"""``python -m tiedvsuntied.sweep dashboard``: the W&B view built from a real sweep's runs
(the tiny sweep, logged offline), without a server."""

from __future__ import annotations

import pytest

from tiedvsuntied.sweep.dashboard import GROUP_BY, dashboard, logged_metrics, view


@pytest.mark.slow
def test_the_view_groups_by_tie_init_and_size_and_every_panel_names_a_logged_metric(tiny_sweep):
    logged = logged_metrics(tiny_sweep)
    built = view(tiny_sweep, "someone", "tiedvsuntied", "tiny")
    names = [s.name for s in built.sections]
    assert names == ["losses", "gradient split", "embedding probes", "throughput"]
    plotted = [y for s in built.sections for p in s.panels for y in p.y]
    assert plotted and set(plotted) <= logged  # no panel waits for a metric nobody logs
    assert {"val/loss", "train/grad_norm_in", "train/grad_norm_out", "train/tokens_per_s"} <= set(
        plotted
    )
    assert {m for m in logged if m.startswith("probe/")} <= set(plotted)
    assert [g.name for g in built.runset_settings.groupby] == GROUP_BY
    said = dashboard(tiny_sweep)  # offline: the command to run after wandb sync, nothing saved
    assert said.startswith("the runs were logged offline: after `wandb sync ")
    assert f"python -m tiedvsuntied.sweep dashboard {tiny_sweep} --entity ENTITY" in said
