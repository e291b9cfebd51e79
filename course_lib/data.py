"""Corpora and batching.

`load_text("tinyshakespeare")` looks for the file in this order:

1. `$COURSE_DATA_DIR/<file>` (CI sets it to the shared corpus folder);
2. `data/<file>` in the course repository;
3. the user cache, `$XDG_CACHE_HOME/llm-course/` (default `~/.cache/llm-course/`).

If none has it, the file is downloaded once into the cache. Every file is checked against its
sha256 before use: a file with the wrong contents is an error, never silently used.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Corpus:
    filename: str
    url: str
    sha256: str
    n_bytes: int


CORPORA = {
    "tinyshakespeare": Corpus(
        filename="tinyshakespeare.txt",
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        n_bytes=1_115_394,
    ),
}


class DataFileError(RuntimeError):
    """A corpus is missing, cannot be downloaded, or has the wrong contents."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-course"


def candidate_paths(name: str = "tinyshakespeare") -> list[Path]:
    """Where `load_text(name)` looks, in order."""
    corpus = _corpus(name)
    paths = []
    if os.environ.get("COURSE_DATA_DIR"):
        paths.append(Path(os.environ["COURSE_DATA_DIR"]) / corpus.filename)
    paths.append(REPO_ROOT / "data" / corpus.filename)
    paths.append(cache_dir() / corpus.filename)
    return paths


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _corpus(name: str) -> Corpus:
    if name not in CORPORA:
        raise ValueError(f"unknown corpus {name!r}; available: {sorted(CORPORA)}")
    return CORPORA[name]


def _verify(path: Path, corpus: Corpus) -> None:
    actual = sha256_of(path)
    if actual != corpus.sha256:
        raise DataFileError(
            f"{path} does not have the expected contents (sha256 {actual}, expected "
            f"{corpus.sha256}, {corpus.n_bytes:,} bytes). It may be truncated or a different "
            f"file. Delete it and run again to download it, or replace it with the file from "
            f"{corpus.url}"
        )


def _download(name: str, destination: Path, timeout: float) -> None:
    corpus = _corpus(name)
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(corpus.url, timeout=timeout) as response:
            payload = response.read()
    except (urllib.error.URLError, OSError) as error:
        places = "\n".join(f"  - {p}" for p in candidate_paths(name))
        raise DataFileError(
            f"could not download {corpus.filename} from {corpus.url} ({error}).\n"
            f"If you are offline, download it elsewhere and put it in one of:\n{places}\n"
            f"or set COURSE_DATA_DIR to the folder that holds {corpus.filename}."
        ) from None
    # Write atomically so an interrupted download never leaves a partial file behind.
    with tempfile.NamedTemporaryFile(dir=destination.parent, delete=False) as tmp:
        tmp.write(payload)
    tmp_path = Path(tmp.name)
    try:
        _verify(tmp_path, corpus)
    except DataFileError:
        tmp_path.unlink(missing_ok=True)
        raise
    tmp_path.replace(destination)


def data_path(name: str = "tinyshakespeare", *, download: bool = True, timeout: float = 30.0) -> Path:
    """The verified local path of a corpus, downloading it into the cache if needed."""
    corpus = _corpus(name)
    for path in candidate_paths(name):
        if path.is_file():
            _verify(path, corpus)
            return path
    target = cache_dir() / corpus.filename
    if not download:
        places = "\n".join(f"  - {p}" for p in candidate_paths(name))
        raise DataFileError(f"{corpus.filename} not found. Put it in one of:\n{places}")
    _download(name, target, timeout)
    return target


def load_text(name: str = "tinyshakespeare", *, download: bool = True) -> str:
    """The corpus as one string (UTF-8)."""
    return data_path(name, download=download).read_text(encoding="utf-8")


class CharVocab:
    """A character-level vocabulary: every distinct character of a text gets an id (sorted)."""

    def __init__(self, text: str):
        if not text:
            raise ValueError("cannot build a vocabulary from an empty text")
        self.chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.itos = dict(enumerate(self.chars))

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(
                f"characters not in the vocabulary: {unknown[:10]!r}; build the vocabulary "
                f"from a text that contains them"
            )
        return [self.stoi[ch] for ch in text]

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [i for i in ids if i not in self.itos]
        if bad:
            raise ValueError(f"unknown token ids {bad[:10]}; valid ids are 0..{len(self) - 1}")
        return "".join(self.itos[i] for i in ids)


def train_val_split(data, val_fraction: float = 0.1):
    """Split a sequence (string, list or 1-D tensor) into its first (1 - f) and last f parts."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be strictly between 0 and 1, got {val_fraction}")
    n_train = int(len(data) * (1.0 - val_fraction))
    if n_train == 0 or n_train == len(data):
        raise ValueError(f"a sequence of length {len(data)} is too short to split at {val_fraction}")
    return data[:n_train], data[n_train:]


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    *,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of token ids: inputs x and next-token targets y, both (batch, block) and
    int64 (what embeddings and cross-entropy take), whatever integer dtype `data` is stored in
    (uint16 token files, say).

    y[b, t] == x[b, t + 1] for t < block - 1: the target of each position is the next token.
    """
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool:
        raise ValueError(f"data must hold integer token ids, got dtype {data.dtype}; convert it with .long()")
    if block_size < 1 or batch_size < 1:
        raise ValueError(f"batch_size and block_size must be positive, got {batch_size}, {block_size}")
    if len(data) <= block_size:
        raise ValueError(
            f"data has {len(data)} tokens, needs more than block_size={block_size}; "
            f"use a shorter block or more data"
        )
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets].long()
    y = data[starts[:, None] + offsets + 1].long()
    device = torch.device(device)
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)
