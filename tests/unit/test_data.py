"""course_lib.data: the search order, the checksum, the offline error, and batching."""

from __future__ import annotations

import hashlib
import urllib.error

import pytest
import torch

from course_lib import data

SHA = data.CORPORA["tinyshakespeare"].sha256


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No COURSE_DATA_DIR, an empty cache, an empty repo data/ folder, and no network."""
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "REPO_ROOT", tmp_path / "repo")

    def offline(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(data.urllib.request, "urlopen", offline)
    return tmp_path


def test_loads_the_shared_corpus_and_checks_its_hash(shakespeare):
    assert len(shakespeare.encode("utf-8")) == 1_115_394
    assert hashlib.sha256(shakespeare.encode("utf-8")).hexdigest() == SHA
    assert shakespeare.startswith("First Citizen:")


def test_search_order_is_env_then_repo_then_cache(isolated, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(isolated / "env"))
    paths = data.candidate_paths("tinyshakespeare")
    assert paths == [
        isolated / "env" / "tinyshakespeare.txt",
        isolated / "repo" / "data" / "tinyshakespeare.txt",
        isolated / "cache" / "llm-course" / "tinyshakespeare.txt",
    ]


def test_first_existing_candidate_wins(isolated, shakespeare, monkeypatch):
    cached = isolated / "cache" / "llm-course" / "tinyshakespeare.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text(shakespeare, encoding="utf-8")
    assert data.data_path("tinyshakespeare") == cached
    in_repo = isolated / "repo" / "data" / "tinyshakespeare.txt"
    in_repo.parent.mkdir(parents=True)
    in_repo.write_text(shakespeare, encoding="utf-8")
    assert data.data_path("tinyshakespeare") == in_repo


def test_offline_error_says_where_to_put_the_file(isolated):
    with pytest.raises(data.DataFileError) as error:
        data.load_text("tinyshakespeare")
    message = str(error.value)
    assert "could not download" in message
    assert str(isolated / "repo" / "data" / "tinyshakespeare.txt") in message
    assert "COURSE_DATA_DIR" in message


def test_download_disabled_lists_the_places(isolated):
    with pytest.raises(data.DataFileError, match="not found. Put it in one of"):
        data.load_text("tinyshakespeare", download=False)


def test_a_file_with_the_wrong_contents_is_an_error(isolated, monkeypatch):
    bad = isolated / "env" / "tinyshakespeare.txt"
    bad.parent.mkdir()
    bad.write_text("To be, or not to be (truncated)")
    monkeypatch.setenv("COURSE_DATA_DIR", str(bad.parent))
    with pytest.raises(data.DataFileError, match="does not have the expected contents"):
        data.load_text("tinyshakespeare")


class FakeResponse:
    def __init__(self, payload: bytes):
        self.payload = payload

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read(self):
        return self.payload


def test_download_is_verified_and_cached(isolated, shakespeare, monkeypatch):
    calls = []
    response = FakeResponse(shakespeare.encode("utf-8"))
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: calls.append(url) or response)
    assert data.load_text("tinyshakespeare") == shakespeare
    assert data.load_text("tinyshakespeare") == shakespeare
    assert len(calls) == 1, "the second call must read the cache, not download again"


def test_a_corrupt_download_is_rejected_and_not_cached(isolated, monkeypatch):
    response = FakeResponse(b"<html>captive portal</html>")
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: response)
    with pytest.raises(data.DataFileError, match="expected contents"):
        data.load_text("tinyshakespeare")
    assert not list((isolated / "cache" / "llm-course").glob("*")), "a corrupt download must not be kept"


def test_unknown_corpus_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown corpus 'wikitext'"):
        data.load_text("wikitext")


def test_char_vocab_round_trips_and_is_sorted(shakespeare):
    vocab = data.CharVocab(shakespeare)
    assert len(vocab) == 65
    assert vocab.chars == sorted(vocab.chars)
    sample = shakespeare[:500]
    assert vocab.decode(vocab.encode(sample)) == sample
    assert vocab.decode(torch.tensor(vocab.encode("ROMEO:"))) == "ROMEO:"


def test_char_vocab_rejects_unknown_input():
    vocab = data.CharVocab("abc")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        vocab.encode("abd")
    with pytest.raises(ValueError, match="unknown token ids"):
        vocab.decode([0, 7])
    with pytest.raises(ValueError, match="empty"):
        data.CharVocab("")


def test_train_val_split_keeps_order_and_sizes():
    train, val = data.train_val_split(list(range(100)), 0.1)
    assert train == list(range(90))
    assert val == list(range(90, 100))
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        data.train_val_split([1, 2, 3], 1.0)


def test_get_batch_targets_are_inputs_shifted_by_one():
    tokens = torch.arange(1000)
    x, y = data.get_batch(tokens, batch_size=8, block_size=16, generator=torch.Generator().manual_seed(0))
    assert x.shape == (8, 16)
    assert y.shape == (8, 16)
    assert torch.equal(y, x + 1)
    assert x.device.type == "cpu"


def test_get_batch_is_reproducible_with_a_generator():
    tokens = torch.arange(500)
    a = data.get_batch(tokens, 4, 8, generator=torch.Generator().manual_seed(3))
    b = data.get_batch(tokens, 4, 8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0])
    assert torch.equal(a[1], b[1])


def test_get_batch_rejects_bad_input():
    with pytest.raises(ValueError, match="more than block_size"):
        data.get_batch(torch.arange(8), 2, 8)
    with pytest.raises(ValueError, match="1-D"):
        data.get_batch(torch.zeros(4, 4, dtype=torch.long), 2, 2)
    with pytest.raises(ValueError, match="integer token ids"):
        data.get_batch(torch.arange(20, dtype=torch.float32), 2, 2)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.int32, torch.int64])
def test_get_batch_returns_int64_ids_whatever_the_storage_dtype(dtype):
    tokens = torch.arange(200).to(dtype)
    x, y = data.get_batch(tokens, 3, 5, generator=torch.Generator().manual_seed(1))
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:])
    x64, _ = data.get_batch(tokens.long(), 3, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x, x64)
