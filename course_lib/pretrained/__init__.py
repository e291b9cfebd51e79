"""The small character-level GPT that ships with the package (lessons 08 and 09 generate with it).

Each model is two files here: NAME.pt (float16 weights, the GPTConfig, the vocabulary) and
NAME.json (the sha256 of the .pt, its validation loss, the command that trained it).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import torch

from course_lib.data import CharVocab, load_text, train_val_split
from course_lib.metrics import corpus_loss
from course_lib.model import GPT, GPTConfig

PRETRAINED_DIR = Path(__file__).resolve().parent
FORMAT = "course_lib.pretrained/1"


class Pretrained(NamedTuple):
    model: GPT
    vocab: CharVocab
    info: dict


def available() -> list[str]:
    return sorted(p.stem for p in PRETRAINED_DIR.glob("*.json"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _vocab_from_chars(chars: list[str]) -> CharVocab:
    return CharVocab("".join(chars))


def validation_loss(model: GPT, vocab: CharVocab, dataset: str = "tinyshakespeare",
                    val_fraction: float = 0.1) -> float:
    """corpus_loss over the whole validation split (the last val_fraction of the corpus)."""
    text = load_text(dataset)
    _, val = train_val_split(torch.tensor(vocab.encode(text), dtype=torch.long), val_fraction)
    return corpus_loss(model, val, model.config.block_size)


def export_pretrained(model: GPT, vocab: CharVocab, path: str | os.PathLike, *, command: str,
                      train_config: dict, steps: int, trained_on: str) -> dict:
    """Write NAME.pt (float16) and NAME.json; the recorded validation loss is that of the
    float16 weights, measured on the CPU in float32 by `validation_loss`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float16).clone() for k, v in model.state_dict().items()
             if not (model.config.tie_weights and k == "lm_head.weight")}
    torch.save({"format": FORMAT, "model_config": asdict(model.config), "vocab": vocab.chars,
                "state_dict": state}, path)
    reloaded = _load_file(path)
    val_loss = validation_loss(reloaded.model, reloaded.vocab, train_config["dataset"],
                               train_config["val_fraction"])
    info = {"name": path.stem, "file": path.name, "bytes": path.stat().st_size,
            "sha256": _sha256(path), "val_loss": round(val_loss, 6),
            "val_loss_how": "course_lib.pretrained.validation_loss: mean cross-entropy (nats) "
                            "over the whole validation split, float32 on the CPU, weights as "
                            "stored (float16)",
            "parameters": reloaded.model.num_params(), "steps": steps, "command": command,
            "train_config": train_config, "trained_on": trained_on, "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    path.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _load_file(path: Path, info: dict | None = None, device="cpu") -> Pretrained:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a course_lib pretrained model (format {FORMAT!r}).")
    config = GPTConfig(**payload["model_config"])
    model = GPT(config)
    state = {k: v.float() for k, v in payload["state_dict"].items()}
    if config.tie_weights:
        state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    model.to(device).eval()
    return Pretrained(model, _vocab_from_chars(payload["vocab"]), info or {})


def load_pretrained(name: str = "shakespeare_char", device: str | torch.device = "cpu") -> Pretrained:
    """(model, vocab, info): the shipped model in eval mode, float32, on `device`.

    info holds the validation loss, the training command and the sha256, which is checked.
    """
    names = available()
    if name not in names:
        raise ValueError(f"no pretrained model {name!r}; the package ships {names}.")
    info = json.loads((PRETRAINED_DIR / f"{name}.json").read_text())
    path = PRETRAINED_DIR / info["file"]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall the package (or `git checkout "
                                f"course_lib/pretrained` in a clone).")
    digest = _sha256(path)
    if digest != info["sha256"]:
        raise ValueError(f"{path} has sha256 {digest[:12]}..., but {name}.json records "
                         f"{info['sha256'][:12]}...: the file is damaged or was replaced; "
                         "restore it (git checkout, or reinstall).")
    return _load_file(path, info, device)
