"""What every figure shares (figures.style, figures.labels): each registered output drawn once on
the session's results, its caption, labels, legends, saving and publishing."""

from __future__ import annotations

import numpy as np
import pandas as pd
from fake_results import write_run, write_sweep
from helpers import lines, texts
from matplotlib.figure import Figure

from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.figures import style
from tiedvsuntied.figures.loss import (
    fig_grad_split,
    fig_initial_loss,
    fig_loss_vs_params,
    fig_val_loss,
)
from tiedvsuntied.figures.similarity import fig_embedding_geometry
from tiedvsuntied.figures.style import (
    TIE_COLOR,
    publish,
    save_figure,
)

TIED, UNTIED = TIE_COLOR[True].lower(), TIE_COLOR[False].lower()


def test_caption_counts_seeds_per_cell_and_names_the_corpus(tmp_path):
    sweep = write_sweep(tmp_path / "sw", init_stds=("1.0",), seeds=(0, 1, 2))
    write_run(sweep, tie=True, init_std="1.0", seed=3)  # one cell with 4 seeds
    write_run(sweep, tie=True, init_std="1.0", seed=0, replicate=1)
    res = load_results(sweep)
    text = style.describe_runs(res.runs)
    assert text == (
        "nano (d=32), 20 steps · input (text) · V = 512 · "
        "n = 3–4 seeds/cell (+1 replicate run: noise floor)"
    )
    one = res.runs[res.runs["seed"] == 0].iloc[:1]
    assert style.seeds_per_cell(one) == "n = 1 seed/cell"


def test_corpus_label_reads_the_data_config_and_falls_back_to_the_table(tmp_path):
    from tiedvsuntied.figures.labels import corpus_label

    configs = {
        "shakespeare": "data:\n  name: text\n  files: /x/tinyshakespeare/input.txt\n"
        "  encoding: gpt2\n  vocab: full\n",
        "wiki": "data:\n  name: wikitext2\n  source: hub\n  path: Salesforce/wikitext\n"
        "  config: wikitext-2-raw-v1\n  encoding: gpt2\n  vocab: seen\n",
        "mine": "data:\n  name: text\n  files: [/x/novels/moby_dick.txt]\n  encoding: bytes\n",
        "books": "data:\n  name: gutenberg\n  files: /x/gutenberg\n  encoding: gpt2\n"
        "  split: document\n  group_by: author\n",
    }
    labels = {}
    for name, config in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(config)
        labels[name] = corpus_label({"path": str(tmp_path / name), "data": "x", "data_id": "i"})
    assert labels == {
        "shakespeare": "Tiny Shakespeare (text, GPT-2 tokens)",
        "wiki": "WikiText-2 (wikitext2, GPT-2 tokens, closed vocabulary)",
        "mine": "moby_dick (text, bytes)",
        "books": "Project Gutenberg books (gutenberg, GPT-2 tokens, split by author)",
    }
    assert corpus_label({"path": None, "data": "text", "data_id": "abc"}) == "data text (abc)"


def test_a_numeric_init_std_of_another_width_is_labelled_with_both_numbers():
    label = style.init_label("0.036", short=True, widths=[128])
    assert label == "init std 0.036, ($d^{-1/2}$ at d=768; here $d^{-1/2}$ = 0.088)"
    assert style.init_label("0.036", widths=[768]) == "init std 0.036"  # d^-0.5 here
    assert style.init_label("1.0", widths=[128]) == "init std 1.0"
    assert style.init_label("inv_sqrt_d", widths=[128]) == r"init std $d^{-1/2}$"


def test_save_figure_writes_each_format(tmp_path, drawn):
    fig = drawn.outputs["fig2_loss_vs_params"][1]
    paths = save_figure(fig, tmp_path / "out", "f", ("pdf", "png", "svg"))
    assert [p.name for p in paths] == ["f.pdf", "f.png", "f.svg"]
    assert paths[0].read_bytes()[:4] == b"%PDF" and paths[1].read_bytes()[:4] == b"\x89PNG"
    assert all(p.stat().st_size > 1000 for p in paths)


def test_publish_shows_an_empty_figure_but_writes_no_file(drawn, tmp_path, capsys):
    fig = drawn.outputs["fig7_finetune"][1]
    publish(fig, tmp_path, "fig7_finetune", ("png",))
    assert "fig7_finetune: not written: not fine-tuning runs" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def _bands(fig: Figure) -> int:
    return sum(len(ax.collections) for ax in fig.axes)


def test_fewer_than_three_seeds_draw_each_seed_not_a_band(tmp_path):
    two = load_results(write_sweep(tmp_path / "two", init_stds=("1.0",), seeds=(0, 1)))
    three = load_results(write_sweep(tmp_path / "three", init_stds=("1.0",), seeds=(0, 1, 2)))
    fig2, fig3 = (
        fig_val_loss(two.runs, two.history),
        fig_val_loss(three.runs, three.history),
    )
    assert _bands(fig2) == 0 and _bands(fig3) == 2  # a t-band per arm only with 3 seeds
    thin = [line for line in lines(fig2) if line.get_linewidth() < 1]
    assert len(thin) == 4  # each seed of each arm
    assert "< 3 seeds: each seed, no CI" in texts(fig2) and "t-CI over seeds (n=3)" in texts(fig3)
    bars = fig_loss_vs_params(two.runs)
    segments = [seg for ax in bars.axes for c in ax.collections for seg in c.get_segments()]
    assert not any(np.isfinite(seg).all() for seg in segments)  # no error bars at n = 2
    assert _bands(fig_grad_split(two.runs, two.history)) == 0


def test_legends_name_only_the_arms_drawn(fig_results, drawn):
    """A sweep of tied runs only: no figure's legend lists an untied arm it did not draw."""
    tied = fig_results.select(fig_results.runs["tie"] == True)  # noqa: E712
    for fig in (
        fig_loss_vs_params(tied.runs),
        fig_initial_loss(tied.runs),
        fig_embedding_geometry(tied.runs),
    ):
        labels = [t.get_text() for t in fig.legends[0].texts]
        assert "tied" in labels and "untied" not in labels, labels
    both = [t.get_text() for t in drawn.outputs["fig2_loss_vs_params"][1].legends[0].texts]
    assert both[:2] == ["tied", "untied"]


def test_a_run_is_named_with_its_variant_so_a_t5_run_is_told_from_its_plain_twin():
    from tiedvsuntied.figures.style import run_label

    name = "tied_init1.0_nano_seed0"
    plain = pd.Series({"name": name, "run_id": "a", "variant": None})
    t5 = pd.Series({"name": name, "run_id": "b", "variant": "head.t5_rescale=True"})
    assert run_label(plain) == name
    assert run_label(t5) == f"{name} [head.t5_rescale=True]"
