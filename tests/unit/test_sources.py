"""Where tokens come from (tiedvsuntied.data.sources): the tokenizer, local text files, Hub
datasets (a local dataset folder: the same code path, no network), rows, documents and the
checks before any work. Byte-level encoding on text made here; GPT-2 only where its files are."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from conftest import (
    SHARED_DATA,
    byte_tokens,
    joined,
    needs_gpt2,
    play_text,
    text_config,
    wiki_text,
    words,
    write,
)

from tiedvsuntied.data.cache import SPLITS, prepare_data
from tiedvsuntied.data.config import DataConfig, DataError
from tiedvsuntied.data.sources import check_data, load_encoding

WIKITEXT2 = SHARED_DATA / "wikitext-2"


def test_bytes_encoding_is_a_tiktoken_encoding_that_round_trips_any_utf8():
    enc = load_encoding("bytes")
    text = "naïve 数据 🙂\x00\n\t ' x" + "".join(map(chr, range(32, 1000)))
    assert enc.n_vocab == 257 and enc.eot_token == 256
    assert enc.encode_ordinary(text) == byte_tokens(text)
    assert enc.decode(enc.encode_ordinary(text)) == text
    assert enc.encode("<|endoftext|>", allowed_special="all") == [256]


def test_text_file_split_into_contiguous_blocks_tokenized_exactly(corpus, play):
    raw = play.read_text()
    ranges = [corpus.meta(s)["char_range"] for s in SPLITS]
    assert [ranges[0][0], ranges[2][1]] == [0, len(raw)]
    assert ranges[0][1] == ranges[1][0] and ranges[1][1] == ranges[2][0]
    assert all(raw[a - 1] == "\n" for a, _ in ranges[1:])  # cut at line boundaries
    assert all(abs((b - a) / len(raw) - 0.05) < 0.005 for a, b in ranges[1:])
    for split, (a, b) in zip(SPLITS, ranges, strict=True):  # one document each, no EOT
        tokens = corpus.tokens(split)
        assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16
        assert np.asarray(tokens).tolist() == byte_tokens(raw[a:b])


def wikitext_articles(text: str) -> list[str]:
    docs, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith(" = Article") and current:
            docs.append("".join(current))
            current = []
        current.append(line)
    return [d for d in docs + ["".join(current)] if not d.isspace()]


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\n+", text.replace("\n \n", "\n\n")) if p.strip()]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("wikitext", wikitext_articles),
        ("paragraph", paragraphs),
        ("row", lambda t: [line for line in t.splitlines(keepends=True) if line.strip()]),
        ("file", lambda t: [t]),
    ],
)
def test_end_of_text_separates_documents_as_configured(tmp_path, mode, expected):
    if mode == "wikitext":
        text = wiki_text()
    else:
        text = play_text(300).replace("\n\nSpeaker 5", "\n \n  Speaker 5")
    files = {s: str(write(tmp_path, f"{s}.txt", text)) for s in ("train", "validation", "test")}
    corpus = prepare_data(text_config(files, documents=mode))
    docs = expected(text)
    assert corpus.meta("val")["n_documents"] == len(docs) and (mode == "file" or len(docs) > 10)
    assert np.asarray(corpus.tokens("val")).tolist() == joined(docs)
    if mode == "wikitext":  # every document starts with its title; formula rows are not titles
        text_back = corpus.encoding.decode(corpus.tokens("val").tolist())
        assert all(d.startswith(" = Article") for d in text_back.split("<|endoftext|>"))


def test_several_files_for_one_split_are_separate_documents(tmp_path):
    a = write(tmp_path, "a.txt", play_text(50))
    b = write(tmp_path, "b.txt", play_text(900, seed=2))
    corpus = prepare_data(text_config([str(a), str(b)]))
    tokens = np.asarray(corpus.tokens("train")).tolist()
    assert corpus.meta("train")["n_documents"] == 2 and tokens.count(256) == 1
    assert tokens[: tokens.index(256)] == byte_tokens(a.read_text())
    assert corpus.meta("val")["n_documents"] == corpus.meta("test")["n_documents"] == 1  # b's tail


def test_rows_break_at_every_line_boundary_python_knows(tmp_path):
    """Rows are str.splitlines lines, as the cache's format version 2 made them (datasets' text
    builder breaks at \\n only: its rows, and so the tokens under the same key, would differ)."""
    text = "a\x0cb\n\u2028c\nd\x85e\n"
    path = str(write(tmp_path, "r.txt", text))
    corpus = prepare_data(text_config({"train": path, "val": path, "test": path}, documents="row"))
    rows = [r for r in text.splitlines(keepends=True) if r.strip()]
    assert len(rows) == 5 and np.asarray(corpus.tokens("val")).tolist() == joined(rows)


@needs_gpt2
@pytest.mark.skipif(not WIKITEXT2.is_dir(), reason=f"no WikiText-2 at {WIKITEXT2}")
def test_gpt2_wikitext2_test_split_has_60_articles():
    files = {"train": str(WIKITEXT2 / "valid.txt"), "validation": str(WIKITEXT2 / "test.txt")}
    config = DataConfig(name="wt2", source="text", documents="wikitext", files=files)
    corpus = prepare_data(config)
    assert corpus.meta("val")["n_documents"] == 60
    articles = corpus.encoding.decode(corpus.tokens("val").tolist()).split("<|endoftext|>")
    assert articles[1].startswith(" = ")


# ---------------------------------------------------------------------------- the Hub


def hub_config(folder, **keys) -> DataConfig:
    return DataConfig(**{"source": "hub", "path": str(folder), "config": None, **keys})


def test_hub_branch_holds_out_missing_validation_and_matches_the_text_branch(tmp_path):
    folder = tmp_path / "wt_local"  # a local dataset folder: train + test, no validation
    folder.mkdir()
    train = write(folder, "train.txt", wiki_text(20))
    test = write(folder, "test.txt", wiki_text(5, seed=3))
    hub = prepare_data(hub_config(folder, name="h", encoding="bytes", documents="wikitext"))
    assert hub.meta("train")["row_range"][0] == 0
    assert hub.meta("val")["row_range"][0] == hub.meta("train")["row_range"][1]  # train's tail
    # rows come without line breaks; documents are rebuilt exactly: the text branch's tokens
    text = prepare_data(text_config({"train": str(train), "test": str(test)}, documents="wikitext"))
    assert np.array_equal(hub.tokens("test"), text.tokens("test"))
    assert hub.meta("test")["n_documents"] == 5
    with pytest.raises(DataError, match=r"text_column='content'.*columns: \['text'\]"):
        prepare_data(hub_config(folder, text_column="content", encoding="bytes"))
    with pytest.raises(DataError, match=r"val_split='dev2'.*available: \['train', 'test'\]"):
        prepare_data(hub_config(folder, val_split="dev2", encoding="bytes"))


def test_hub_records_are_row_documents_and_a_non_text_column_is_refused(tmp_path):
    folder = tmp_path / "records"  # a local dataset of JSON records, one split
    folder.mkdir()
    records = [{"text": f"record {i}: {words(random.Random(i), 20)}", "n": i} for i in range(60)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    corpus = prepare_data(hub_config(folder, encoding="bytes"))
    assert corpus.info()["documents"] == "row"  # auto: not a wikitext path
    a, b = corpus.meta("train")["row_range"]
    assert np.asarray(corpus.tokens("train")).tolist() == joined([r["text"] for r in records[a:b]])
    refused = r"data.text_column='n' .* does not hold text; columns: \['text', 'n'\]"
    with pytest.raises(DataError, match=refused):
        prepare_data(hub_config(folder, text_column="n", encoding="bytes"))


# ---------------------------------------------------------------------------- checks before work


@pytest.mark.parametrize(
    "keys, match",
    [
        (dict(files="nope.txt"), r"data.files: cannot read .*nope\.txt"),
        (dict(files="binary.bin"), r"data.files: .*binary\.bin is not UTF-8 text"),
        (dict(files="empty.txt"), r"data.files: .*empty\.txt is empty"),
        (dict(files=None), r"data.source=text needs data.files"),
        (
            dict(files={"train": "ok.txt", "dev2": "ok.txt"}),
            r"unknown or repeated split key 'dev2'",
        ),
        (dict(encoding="gpt5"), r"data.encoding='gpt5' is not valid; valid: .*'bytes'.*'gpt2'"),
        (dict(val_fraction=1.5), r"data.val_fraction=1.5 must be in \[0, 1\)"),
        (dict(val_fraction=0.6, test_fraction=0.5), "leaves nothing for train"),
        (dict(val_fraction=0.0), r"data.val_fraction must be > 0 to hold val out"),
        (dict(source="hub", documents="paragraph"), r"documents=paragraph needs data.source=text"),
        (dict(source="hub", path=""), r"data.source=hub needs data.path"),
        (dict(num_threads=-1), r"data.num_threads=-1 must be >= 0"),
        (dict(documents="pages"), r"data.documents='pages' is not valid; valid: \['auto', "),
        (dict(vocab="closed"), r"data.vocab='closed' is not valid; valid: \['full', 'seen'\]"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch, keys, match):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "ok.txt", "hello\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    keys = {"files": "ok.txt", "cache_dir": str(tmp_path / "cache"), **keys}
    with pytest.raises(DataError, match=match) as e:  # at construction, or at the file checks
        prepare_data(text_config(**keys))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "cache").exists()  # refused before any work
    check_data(text_config("ok.txt"))
    check_data(DataConfig())  # the default Hub corpus: no network to check it


def test_whitespace_only_split_is_named(tmp_path, play):
    blank = write(tmp_path, "blank.txt", "\n \n\n")
    with pytest.raises(DataError, match=r"split 'train' of text:.* is empty"):
        prepare_data(text_config({"train": str(blank), "val": str(play), "test": str(play)}))
