"""The character model that ships in course_lib/pretrained (lesson 07 trains it; 08 and 09 use it)."""

import hashlib
import json
import shutil

import pytest
import torch

import course_lib.model
import course_lib.pretrained as pretrained
from course_lib.model import GPT, load_pretrained
from course_lib.training import CONFIGS


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    return load_pretrained()


def test_the_shipped_file_is_small_enough_for_git_and_its_sha256_is_recorded():
    info = json.loads((pretrained.PRETRAINED_DIR / "shakespeare_char.json").read_text())
    path = pretrained.PRETRAINED_DIR / info["file"]
    assert path.stat().st_size <= 5_000_000, f"{path} is {path.stat().st_size} bytes, over 5 MB"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == info["sha256"]
    assert info["bytes"] == path.stat().st_size


def test_it_was_trained_by_the_documented_preset(shipped):
    model, vocab, info = shipped
    assert "--config shakespeare_char_pretrained" in info["command"]
    preset = CONFIGS["shakespeare_char_pretrained"]
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size) == (
        preset.model.n_layer, preset.model.n_head, preset.model.n_embd, preset.model.block_size)
    assert info["train_config"]["max_iters"] == preset.max_iters == info["steps"]
    assert isinstance(model, GPT)
    assert not model.training, "load_pretrained returns the model in eval mode"
    assert len(vocab) == c.vocab_size == 65


def test_its_validation_loss_on_the_real_data_matches_the_recorded_one(shipped):
    model, vocab, info = shipped
    measured = pretrained.validation_loss(model, vocab)
    assert measured == pytest.approx(info["val_loss"], abs=1e-4), (
        f"validation loss {measured:.6f}, recorded {info['val_loss']:.6f}")
    assert measured < 1.6, "the shipped model should be far better than the 4.17 of a fresh one"


@pytest.mark.parametrize(("prompt", "expected"), [
    ("First Citizen:\nBefore we proceed any further, hear me spea", "k"),   # the corpus' first line
    ("KING RICHARD II:\nMy lor", "d"),
])
def test_it_is_confident_where_the_next_character_is_obvious(shipped, prompt, expected):
    model, vocab, _ = shipped
    with torch.no_grad():
        probs = model(torch.tensor([vocab.encode(prompt)]))[0][0, -1].softmax(-1)
    top = vocab.decode([int(probs.argmax())])
    message = f"after {prompt[-20:]!r} the model predicts {top!r} with p = {float(probs.max()):.3f}"
    assert top == expected, message
    assert probs.max() > 0.9, message


def test_a_damaged_file_is_refused_with_its_name(tmp_path, monkeypatch):
    for name in ("shakespeare_char.pt", "shakespeare_char.json"):
        shutil.copy(pretrained.PRETRAINED_DIR / name, tmp_path / name)
    with open(tmp_path / "shakespeare_char.pt", "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    monkeypatch.setattr(course_lib.model, "PRETRAINED_DIR", tmp_path)
    with pytest.raises(ValueError, match="shakespeare_char.pt has sha256"):
        pretrained.load_pretrained()


def test_an_unknown_name_lists_the_shipped_ones():
    with pytest.raises(ValueError, match=r"\['shakespeare_char'\]"):
        load_pretrained("gpt5")
