"""The end-to-end tests of tests/unit/test_figures_style.py: every output of the figure
registry drawn."""

from __future__ import annotations

import matplotlib
from helpers import caption_of, lines, texts
from matplotlib.text import Text

from tiedvsuntied.figures.cli import REGISTRY
from tiedvsuntied.studies.sign_flip.analysis import NOT_SIGN_FLIP
from tiedvsuntied.studies.tie_x_init_books.figures import NOT_BOOKS


def test_every_figure_draws_and_says_on_the_image_what_it_shows_and_leaves_out(
    fig_results, tmp_path
):
    rc_before = dict(matplotlib.rcParams)
    outputs = {name: out.write(fig_results, tmp_path, ["png"]) for name, out in REGISTRY.items()}
    rc_kept = dict(matplotlib.rcParams) == rc_before
    for name, (files, fig) in outputs.items():
        study = REGISTRY[name].study
        if study == "tie_x_init_books":  # the second edition's: these runs hold out no documents
            assert fig.empty == NOT_BOOKS and files == []
            continue
        if study == "sign_flip":  # the third edition's: these runs are no sign_flip sweep
            assert fig.empty == NOT_SIGN_FLIP and files == []
            continue
        if study == "size_or_tokens":  # the fourth edition's: no tied/untied cell at its lr here
            assert fig.empty and files == []
            continue
        if fig is None:  # tables
            assert files and all(p.exists() and p.suffix in (".md", ".tex") for p in files)
            continue
        if name == "fig7_finetune":  # not fine-tuned: the panels say so, and no file is written
            assert fig.empty and "not fine-tuning runs: no retain/loss" in texts(fig)
            assert files == [] and not (tmp_path / f"{name}.png").exists()
            continue
        assert [p.name for p in files] == [f"{name}.png"] and not fig.empty
        assert any(len(line.get_xdata()) for line in lines(fig)), f"{name} draws nothing"
        # the caption says what is drawn: sizes, steps, corpus, V, seeds per cell ...
        caption = caption_of(fig)
        assert "20 steps" in caption and "input (text)" in caption, (name, caption)
        assert "V = 512" in caption and "seed" in caption.split("V = 512")[1], (name, caption)
        # ... and, as a footnote, what is left out (all of it, or how many more the console has)
        for item in fig.skipped + fig.flagged:
            assert " ".join(item.split()) in caption or "more (the console lists them)" in caption
        small = [
            t.get_text() for t in fig.findobj(Text) if t.get_text().strip() and t.get_fontsize() < 6
        ]
        assert not small, f"{name}: text below 6 pt: {small[:3]}"
    assert rc_kept  # figures never change the global style
