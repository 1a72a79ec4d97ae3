"""A new user's first hour (issue 56), in process: the shipped corpus and tokenizer are the
default and need nothing downloaded; data that cannot be had is refused before anything is
written; each mistake is one line, never a traceback; a damaged run is named where it is read."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken
from conftest import compose
from fake_results import write_sweep
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from tiedvsuntied import run
from tiedvsuntied.analysis.load import load_results
from tiedvsuntied.data.config import SHIPPED
from tiedvsuntied.data.sources import load_encoding
from tiedvsuntied.figures.output import refuse_unwritable
from tiedvsuntied.presets import CONF_DIR
from tiedvsuntied.sweep.__main__ import main as sweep_main


def refused_line(capsys, call, *args) -> str:
    """The one line a refused command prints (exit code 2)."""
    with pytest.raises(SystemExit) as exit_:
        call(*args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_the_default_data_is_the_shipped_corpus():
    data = compose().data
    assert (data.name, data.source.value, data.encoding) == ("tinyshakespeare", "text", "gpt2")
    assert Path(data.files) == SHIPPED / "tinyshakespeare.txt"
    assert compose("data=wikitext2").data.path == "Salesforce/wikitext"  # one key away
    assert compose("data=gutenberg").data.split.value == "document"


def test_the_shipped_gpt2_is_tiktokens_and_reads_no_cache(monkeypatch, tmp_path):
    """Built from the package's files, token for token tiktoken's gpt2 (where its cache holds
    the downloaded files); tiktoken's cache is neither read nor written."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    load_encoding.cache_clear()
    try:
        shipped = load_encoding("gpt2")
    finally:
        load_encoding.cache_clear()
    assert (shipped.name, shipped.n_vocab, shipped.eot_token) == ("gpt2", 50257, 50256)
    assert not (tmp_path / "empty").exists()
    text = (SHIPPED / "tinyshakespeare.txt").read_text()[:20000]
    monkeypatch.undo()
    try:
        downloaded = tiktoken.get_encoding("gpt2")
    except Exception:  # no cache of the download here: the shipped files are all there is
        pytest.skip("tiktoken's own gpt2 files are not cached here (TIKTOKEN_CACHE_DIR)")
    assert shipped._mergeable_ranks == downloaded._mergeable_ranks
    assert shipped.encode(text) == downloaded.encode(text)


def test_plan_refuses_data_it_cannot_read_in_one_line(capsys, tmp_path, monkeypatch):
    """Offline (HF_HUB_OFFLINE, conftest) with no datasets cache: the plan says so, naming the
    data, as the multirun's check does before it records its plan (tests/e2e/test_first_hour)."""
    monkeypatch.chdir(tmp_path)
    line = refused_line(capsys, sweep_main, ["plan", "data=wikitext2", "tie=true,false"])
    assert line.startswith("error: data=wikitext2: not available offline:")
    assert "'Salesforce/wikitext'" in line and "data=text data.files=PATH" in line
    assert not (tmp_path / "results").exists()


def test_dashboard_without_a_wandb_key_is_one_line(capsys, tmp_path, monkeypatch):
    pytest.importorskip("wandb_workspaces")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "sweep").mkdir()
    line = refused_line(capsys, sweep_main, ["dashboard", str(tmp_path / "sweep"), "--entity", "E"])
    assert "--entity E: the W&B view" in line and "wandb login" in line


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["-c", "all"], ["--info"]])
def test_a_config_printed_of_a_multirun_is_one_line(capsys, flag):
    line = refused_line(capsys, run.check_modes, ["-m", "tie=true,false", *flag])
    assert "drop -m" in line and "sweep plan" in line
    run.check_modes(["tie=true", *flag])  # one job: Hydra prints it


def test_help_says_which_groups_take_a_plus():
    """Every group the defaults do not choose (+experiment=, +arm=) is named with its plus in
    --help's text, which otherwise says "choose one with group=option"."""
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", return_hydra_config=True)
        groups = set(GlobalHydra.instance().config_loader().list_groups("")) - {"hydra"}
    help_text = cfg.hydra.help.template
    added = groups - set(cfg.hydra.runtime.choices)
    assert {"arm", "experiment"} <= added and "data" in groups - added
    for group in added:
        assert f"+{group}=" in help_text


def test_a_run_without_its_config_is_named_where_it_is_read(capsys, tmp_path):
    sweep = write_sweep(tmp_path / "s", probes=False)
    gone = sorted(p for p in sweep.iterdir() if (p / "config.yaml").exists())[0]
    (gone / "config.yaml").unlink()
    note = f"damaged: {gone.name}: config.yaml missing"
    assert any(n.startswith(note) for n in load_results(sweep).notes)  # figures print these
    sweep_main(["table", str(sweep)])
    assert f"note: {note}" in capsys.readouterr().err


def test_figures_refuse_an_output_folder_that_takes_no_files(capsys, tmp_path):
    """A file where --out's folder would be: refused at once (a read-only disk: the e2e test)."""
    (tmp_path / "file").write_text("")
    line = refused_line(capsys, refuse_unwritable, tmp_path / "file" / "figs")
    assert f"--out {tmp_path / 'file' / 'figs'} cannot take the figures" in line
    refuse_unwritable(tmp_path / "new" / "figs")  # made when the figures are written
    assert not (tmp_path / "new").exists()
