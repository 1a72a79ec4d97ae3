"""The end-to-end tests of tests/unit/test_cache.py: they start processes or train runs to the
end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import play_text, text_config, write

from tiedvsuntied.data.cache import SPLITS, prepare_data


def build_events(folder: Path) -> list[str]:
    return [json.loads(line)["event"] for line in (folder / "builds.log").read_text().splitlines()]


_WORKER = r"""
import json, sys, time
from pathlib import Path
from tiedvsuntied.data.cache import prepare_data
from tiedvsuntied.data.config import DataConfig
files, cache, ready, go = sys.argv[1:]
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.002)
config = dict(name="worker", source="text", encoding="bytes", num_threads=1)
c = prepare_data(DataConfig(files=files, cache_dir=cache, **config))
tokens = {s: c.tokens(s).tolist() for s in ("train", "test")}
print(json.dumps({"dir": str(c.dir), "built": c.built, **tokens}))
"""


def prepare_in_a_process(files, cache, ready, go) -> subprocess.Popen:
    """prepare_data in a process of its own, once the file ``go`` exists."""
    command = [sys.executable, "-c", _WORKER, *map(str, (files, cache, ready, go))]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_concurrent_preparations_tokenize_once_and_agree(play, corpus, tmp_path):
    go, n = tmp_path / "go", 3
    procs = [
        prepare_in_a_process(play, tmp_path / "cache", tmp_path / f"ready{i}", go) for i in range(n)
    ]
    deadline = time.time() + 60
    while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), "no start"
        time.sleep(0.01)
    go.touch()  # all start preparing at the same moment
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out))
    assert sorted(len(o["built"]) for o in outs) == [0] * (n - 1) + [3]  # one built, the rest read
    assert len({o["dir"] for o in outs}) == 1
    assert build_events(Path(outs[0]["dir"])) == ["start", "done"]
    for o in outs:
        assert o["train"] == corpus.tokens("train").tolist()
        assert o["test"] == corpus.tokens("test").tolist()


@pytest.mark.slow
def test_a_build_killed_while_it_writes_leaves_nothing_trusted_and_is_rebuilt(tmp_path):
    """A real build, SIGKILLed while it holds the corpus's lock and tokenizes train into its
    temporary file: the lock dies with the process, and the debris is never trusted."""
    text = play_text(200_000)  # ~13 MB: tokenizing train takes long enough to be caught at it
    big, cache = write(tmp_path, "big.txt", text), tmp_path / "cache"
    proc = prepare_in_a_process(big, cache, tmp_path / "ready", tmp_path)  # go at once
    try:
        deadline = time.time() + 120
        while not list(cache.glob("tokens/*/.train.bin.tmp*")):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.001)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (folder,) = (cache / "tokens").iterdir()
    assert list(folder.glob(".*.tmp*")) and build_events(folder) == ["start"]  # killed mid-build
    assert not list(folder.glob("*.bin")) and not list(folder.glob("train.json"))
    rebuilt = prepare_data(text_config(str(big), name="worker", cache_dir=str(cache)))
    assert rebuilt.dir == folder and rebuilt.built == list(SPLITS)  # the lock died with it
    assert not list(folder.glob(".*.tmp*")) and build_events(folder) == ["start", "start", "done"]
    a, b = rebuilt.meta("train")["char_range"]
    assert np.array_equal(rebuilt.tokens("train"), np.frombuffer(text[a:b].encode(), np.uint8))
