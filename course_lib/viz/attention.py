"""Attention heatmaps and an interactive attention explorer (lessons 03 and 04).

Convention in every plot: rows are queries (the token that is looking), columns are keys
(the tokens it looks at), so row i is the distribution P(j | i) and sums to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np

from course_lib.viz.plots import _to_numpy, heatmap

__all__ = ["AttentionExplorer", "attention_explorer", "attention_heads_grid", "attention_heatmap"]


def _check_labels(values: np.ndarray, query_labels, key_labels) -> tuple[list[str], list[str]]:
    key_labels = query_labels if key_labels is None else key_labels
    query_labels, key_labels = [str(t) for t in query_labels], [str(t) for t in key_labels]
    if values.shape[-2:] != (len(query_labels), len(key_labels)):
        raise ValueError(f"weights of shape {values.shape} need {values.shape[-2]} query labels "
                         f"and {values.shape[-1]} key labels, got {len(query_labels)} and "
                         f"{len(key_labels)}: do the labels come from the same tokenization?")
    return query_labels, key_labels


def attention_heatmap(weights, query_labels: Sequence[str],
                      key_labels: Sequence[str] | None = None, ax=None,
                      title: str | None = None, *, vmax: float | None = None,
                      annotate: bool = False, colorbar: bool = True, cmap: str = "viridis"):
    """Heatmap of one attention matrix (Tq, Tk), tokens on both axes. Returns the axes.

    weights: tensor or array (Tq, Tk) (leading dims of size 1 are squeezed away).
    key_labels: defaults to query_labels (self-attention).
    vmax: top of the colour scale; default the largest weight. Use vmax=1 to compare plots.
    """
    values = _to_numpy(weights)
    while values.ndim > 2 and values.shape[0] == 1:
        values = values[0]
    if values.ndim != 2:
        raise ValueError(f"attention_heatmap needs one (Tq, Tk) matrix, got shape "
                         f"{values.shape}; pick a head first (weights[0, h]) or use "
                         "attention_heads_grid.")
    query_labels, key_labels = _check_labels(values, query_labels, key_labels)
    ax = heatmap(values, row_labels=query_labels, col_labels=key_labels, title=title or "",
                 cmap=cmap, annotate=annotate, colorbar=colorbar, ax=ax,
                 vmin=0.0, vmax=vmax if vmax is not None else max(float(values.max()), 1e-9))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    return ax


def attention_heads_grid(weights, labels: Sequence[str], key_labels: Sequence[str] | None = None,
                         *, ncols: int = 4, title: str | None = None, vmax: float | None = None,
                         cell_size: float = 2.6):
    """One heatmap per head, weights (H, Tq, Tk) (or (1, H, Tq, Tk)), on one shared colour
    scale. Returns the figure."""
    values = _to_numpy(weights)
    if values.ndim == 4 and values.shape[0] == 1:
        values = values[0]
    if values.ndim != 3:
        raise ValueError(f"attention_heads_grid needs weights of shape (H, Tq, Tk), got "
                         f"{values.shape}.")
    query_labels, key_labels = _check_labels(values, labels, key_labels)
    n_head = values.shape[0]
    ncols = max(1, min(ncols, n_head))
    nrows = math.ceil(n_head / ncols)
    vmax = float(values.max()) if vmax is None else vmax
    fig, axes = plt.subplots(nrows, ncols, figsize=(cell_size * ncols + 1, cell_size * nrows + 0.5),
                             squeeze=False, constrained_layout=True)
    points_per_token = 72 * cell_size / max(len(key_labels), len(query_labels))
    label_size = min(9.0, max(6.0, 0.8 * points_per_token))  # 9 pt unless the tokens are crowded
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= n_head:
            ax.axis("off")
            continue
        image = ax.imshow(values[h], cmap="viridis", vmin=0.0, vmax=max(vmax, 1e-9), aspect="auto")
        ax.set_title(f"head {h}", fontsize=10)
        ax.set_xticks(range(len(key_labels)), labels=key_labels, rotation=90, fontsize=label_size)
        ax.set_yticks(range(len(query_labels)), labels=query_labels, fontsize=label_size)
        ax.set_xlabel("key", fontsize=9)
        ax.set_ylabel("query", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


class AttentionExplorer:
    """The widget behind `attention_explorer`: sentence dropdown, head slider, causal checkbox.

    Attributes `sentence`, `head`, `causal` (the controls), `output` (where the plot goes)
    and `widget` (the whole UI). `weights` holds the (H, T, T) array currently shown.
    """

    def __init__(self, sentences: Sequence[str], tokenize: Callable[[str], Sequence[str]],
                 attention_fn: Callable[[str, bool], object]) -> None:
        import ipywidgets as widgets

        if len(sentences) == 0:
            raise ValueError("attention_explorer needs at least one sentence.")
        self.tokenize, self.attention_fn = tokenize, attention_fn
        self.sentence = widgets.Dropdown(options=list(sentences), value=sentences[0],
                                         description="sentence", layout={"width": "95%"})
        self.head = widgets.IntSlider(value=0, min=0, max=0, description="head")
        self.causal = widgets.Checkbox(value=False, description="causal mask")
        self.output = widgets.Output()
        self.widget = widgets.VBox([self.sentence, widgets.HBox([self.head, self.causal]),
                                    self.output])
        self.weights: np.ndarray | None = None
        self.tokens: list[str] = []
        self._cache: dict[tuple[str, bool], np.ndarray] = {}
        for control in (self.sentence, self.causal):
            control.observe(lambda _change: self.update(recompute=True), names="value")
        self.head.observe(lambda _change: self.update(recompute=False), names="value")
        self.update(recompute=True)

    def _compute(self, sentence: str, causal: bool) -> np.ndarray:
        key = (sentence, causal)
        if key not in self._cache:
            values = _to_numpy(self.attention_fn(sentence, causal))
            while values.ndim > 3 and values.shape[0] == 1:
                values = values[0]
            if values.ndim == 2:
                values = values[None]
            if values.ndim != 3:
                raise ValueError(f"attention_fn must return weights of shape (H, T, T), got "
                                 f"{values.shape}.")
            self._cache[key] = values
        return self._cache[key]

    def update(self, recompute: bool = True) -> None:
        """Recompute (if needed) and redraw the heatmap for the current control values."""
        if recompute:
            self.tokens = [str(t) for t in self.tokenize(self.sentence.value)]
            self.weights = self._compute(self.sentence.value, self.causal.value)
            self.head.max = self.weights.shape[0] - 1   # may clamp head.value (no recursion:
            #                                              the head observer only redraws)
        h = min(self.head.value, self.weights.shape[0] - 1)
        self.output.clear_output(wait=True)
        with self.output:
            fig, ax = plt.subplots(figsize=(max(3.5, 0.45 * len(self.tokens) + 2),
                                            max(3.0, 0.4 * len(self.tokens) + 1.2)))
            masking = "causal" if self.causal.value else "no mask"
            attention_heatmap(self.weights[h], self.tokens, ax=ax,
                              title=f"head {h} ({masking})", vmax=1.0)
            _show(fig)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _show(fig) -> None:
    """Display a figure inside the current output (notebook) and free it."""
    try:
        from IPython.display import display

        display(fig)
    finally:
        plt.close(fig)


def attention_explorer(sentences: Sequence[str], tokenize: Callable[[str], Sequence[str]],
                       attention_fn: Callable[[str, bool], object]) -> AttentionExplorer:
    """An ipywidgets UI to browse attention weights: pick a sentence, a head, causal or not.

    tokenize(sentence) -> list of token strings (the axis labels, length T).
    attention_fn(sentence, causal) -> weights (H, T, T) (a tensor or array; (1, H, T, T) and
        (T, T) are accepted). It must apply the causal mask itself when `causal` is True
        (masking happens before the softmax, so it cannot be done on the weights).
    Results are cached per (sentence, causal). Display the returned object in a notebook.
    """
    return AttentionExplorer(sentences, tokenize, attention_fn)
