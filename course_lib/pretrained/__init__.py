"""The small character-level GPT that ships with the package (lessons 08 and 09 generate with it).

Each model is two files here: NAME.pt (float16 weights, the GPTConfig, the vocabulary) and
NAME.json (the sha256 of the .pt, its validation loss, the command that trained it).
Loading them is `course_lib.model.load_pretrained` (this package depends on the model, never the
other way round); writing them (`export_pretrained`) and measuring them are here.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from course_lib.data import CharVocab, load_text, train_val_split
from course_lib.metrics import corpus_loss

# Loading lives with the model; PRETRAINED_DIR and load_pretrained are re-exported from here.
from course_lib.model import (  # noqa: F401
    GPT,
    PRETRAINED_DIR,
    PRETRAINED_FORMAT,
    _load_pretrained_file,
    _sha256,
    load_pretrained,
)


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
    torch.save({"format": PRETRAINED_FORMAT, "model_config": asdict(model.config), "vocab": vocab.chars,
                "state_dict": state}, path)
    reloaded = _load_pretrained_file(path)
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
