"""``python -m tiedvsuntied.data`` (tiedvsuntied.data.__main__): the presets it loads (in
process), and the command itself (slow: real processes): it prepares and prints the corpus's
info; offline it uses what is cached or fails within seconds in one line; a token cache it
filled serves a compute node without network."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, wiki_text, write
from omegaconf import OmegaConf

from tiedvsuntied.data.__main__ import load_config
from tiedvsuntied.data.cache import SPLITS
from tiedvsuntied.data.config import SHIPPED, DataConfig, DataError, Documents, Source
from tiedvsuntied.data.sources import check_data

#: What each preset resolved to at commit 3608031 besides the DataConfig defaults. Run ids hash
#: every data key (but files, cache_dir, num_threads): a preset may never resolve differently.
PRESETS = {
    "wikitext2": {"documents": "wikitext"},
    "wikitext103": {
        "name": "wikitext103",
        "config": "wikitext-103-raw-v1",
        "documents": "wikitext",
    },
    "text": {"name": "text", "source": "text", "path": "", "config": None, "documents": "file"},
    "hub": {"name": "hub", "path": "", "config": None, "documents": "row"},
    "tinyshakespeare": {  # the default corpus since issue 56, shipped with the package
        **{"name": "tinyshakespeare", "source": "text", "path": "", "config": None},
        **{"documents": "file", "files": str(SHIPPED / "tinyshakespeare.txt")},
    },
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_conf_data_presets_set_only_their_own_values(preset):
    conf = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "data" / f"{preset}.yaml"))
    defaults = OmegaConf.to_container(OmegaConf.structured(DataConfig), enum_to_str=True)
    assert conf and set(conf) <= set(defaults)
    assert [k for k, v in conf.items() if defaults[k] == v] == []  # the schema gives defaults
    required = {"text": ["files=a.txt"], "hub": ["path=org/name"]}.get(preset, [])
    loaded = load_config(preset, required)
    assert isinstance(loaded.source, Source) and isinstance(loaded.documents, Documents)
    expected = {**PRESETS[preset], **dict(o.split("=") for o in required)}
    assert loaded == dataclasses.replace(DataConfig(), **expected)
    if preset == "wikitext2":  # the dataclass default: the same cache key
        assert loaded.documents_mode() == DataConfig().documents_mode()


def test_presets_and_overrides_that_need_a_value_say_so():
    with pytest.raises(DataError, match=r"needs data.files"):
        check_data(load_config("text"))
    with pytest.raises(DataError, match="needs data.path"):
        check_data(load_config("hub"))
    with pytest.raises(DataError, match=r"data.source: .*ftp") as e:
        load_config("text", ["data.source=ftp"])
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"no data preset 'wiki'; valid: \['gutenberg', 'hub', "):
        load_config("wiki")


# ---------------------------------------------------------------------------- the command


def run_cli(args, env, timeout=120):
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.data", *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=timeout,
    )
    return proc, time.time() - started


@pytest.mark.slow
def test_cli_prepares_and_prints_info(play, corpus):
    proc, _ = run_cli(["text", f"data.files={play}", "name=t", "encoding=bytes"], os.environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout)
    assert info["fingerprint"] == corpus.fingerprint and info["built_now"] == []
    assert info["n_tokens"] == {s: corpus.n_tokens(s) for s in SPLITS}
    proc, _ = run_cli(["text", f"files={play}", "encoding=bytes", "--fresh"], os.environ)
    assert proc.returncode == 0 and json.loads(proc.stdout)["built_now"] == list(SPLITS)
    assert "tokens/s" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["cl100k_base", "bytes"])
def test_no_network_and_nothing_cached_fails_within_seconds_in_one_line(tmp_path, encoding):
    """A Hub corpus on a machine without network (no offline variables set): the tokenizer (one
    not shipped: gpt2 and bytes are) and the Hub are both checked before any work, and one line
    names every fix."""
    offline_vars = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TIKTOKEN_CACHE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in offline_vars}
    no_network = "http://127.0.0.1:9"  # a closed port: every request fails at once
    env.update(
        {k: no_network for k in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")},
        no_proxy="",
        NO_PROXY="",
        TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken"),
        HF_HOME=str(tmp_path / "hf"),
        HF_DATASETS_CACHE=str(tmp_path / "hf" / "datasets"),
        TIEDVSUNTIED_CACHE=str(tmp_path / "cache"),
    )
    proc, seconds = run_cli(["wikitext2", f"encoding={encoding}"], env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # no retry warnings
    assert seconds < 20  # loosely: only a guard against retries (they took 29-41 s)
    line = proc.stderr
    assert "'Salesforce/wikitext'" in line and "data=text data.files=PATH" in line
    assert "HF_DATASETS_OFFLINE" in line and "python -m tiedvsuntied.data" in line
    where = f"is not in TIKTOKEN_CACHE_DIR={tmp_path / 'tiktoken'}"
    tokenizer = f"tiktoken encoding 'cl100k_base' {where}"
    assert (tokenizer in line and "data.encoding=gpt2" in line) == (encoding == "cl100k_base")
    assert not (tmp_path / "cache").exists()  # refused before any work


def _fabricate_hub_cache(tmp_path: Path) -> Path:
    """Put 'someorg/wikimini' config 'mini-raw' into a datasets cache the way a download would
    have left it (built by datasets' own text builder, then placed under the Hub name)."""
    import datasets

    files = {
        "train": str(write(tmp_path, "train.txt", wiki_text(20))),
        "test": str(write(tmp_path, "test.txt", wiki_text(6, seed=4))),
    }
    datasets.load_dataset("text", data_files=files, cache_dir=str(tmp_path / "build"))
    (src,) = [Path(p) for p in glob.glob(str(tmp_path / "build/text/*/*/*")) if Path(p).is_dir()]
    dst = tmp_path / "hf" / "someorg___wikimini" / "mini-raw" / "0.0.0" / src.name
    shutil.copytree(src, dst)
    for f in dst.glob("text-*.arrow"):
        f.rename(dst / f.name.replace("text-", "wikimini-"))
    info = json.loads((dst / "dataset_info.json").read_text())
    info.update(config_name="mini-raw", dataset_name="wikimini", builder_name="wikimini")
    (dst / "dataset_info.json").write_text(json.dumps(info))
    return tmp_path / "hf"


@pytest.mark.slow
def test_prepare_where_the_network_is_then_train_on_a_node_without_it(tmp_path):
    """Clusters: `python -m tiedvsuntied.data` fills the token cache once from the datasets
    cache, Hub offline (login node); a compute node with no datasets cache of its own trains from
    the token cache alone, and without the token cache fails at once in one line."""
    login = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(_fabricate_hub_cache(tmp_path)),
        "HF_HOME": str(tmp_path / "home"),
        "TIEDVSUNTIED_CACHE": str(tmp_path / "shared_cache"),
    }
    data = ["path=someorg/wikimini", "config=mini-raw", "documents=wikitext", "encoding=bytes"]
    proc, _ = run_cli(["hub", *data], login)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["n_documents"]["test"] == 6
    node = {**login, "HF_DATASETS_CACHE": str(tmp_path / "empty"), "HF_HOME": str(tmp_path / "h2")}
    keys = ["model=nano", "model.block_size=32", "trainer.max_steps=2", "trainer.eval_interval=2"]
    keys += ["trainer.batch_size=2", "trainer.progress=false", "wandb.mode=disabled"]
    run = subprocess.run(
        [sys.executable, "-m", "tiedvsuntied.run", "data=hub", *(f"data.{d}" for d in data)]
        + [*keys, f"results_dir={tmp_path / 'results'}"],
        cwd=REPO,
        env=node,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (summary,) = (tmp_path / "results" / "default").glob("*/summary.json")
    assert json.loads(summary.read_text())["status"] == "finished"
    proc, seconds = run_cli(["hub", *data, f"cache_dir={tmp_path / 'elsewhere'}"], node)
    assert proc.returncode == 2 and seconds < 20 and len(proc.stderr.strip().splitlines()) == 1
    assert "'someorg/wikimini'" in proc.stderr and "HF_DATASETS_CACHE" in proc.stderr
    assert "data=text data.files=PATH" in proc.stderr
