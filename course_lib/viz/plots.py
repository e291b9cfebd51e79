"""Basic plots shared by every lesson."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import NullFormatter


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x, dtype=float)


def line_plot(
    x,
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    logy: bool = False,
    ax=None,
):
    """One line per named series over a shared x axis. Returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for label, values in series.items():
        ax.plot(_to_numpy(x), _to_numpy(values), marker="o", markersize=3, label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return ax


def heatmap(
    matrix,
    *,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str = "",
    cmap: str = "viridis",
    annotate: bool = False,
    colorbar: bool = True,
    ax=None,
    **imshow_kwargs,
):
    """A matrix as an image, with optional labels on both axes. Returns the axes."""
    values = _to_numpy(matrix)
    if values.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {values.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.45 * values.shape[1] + 1.5), max(2.5, 0.4 * values.shape[0] + 1)))
    image = ax.imshow(values, cmap=cmap, aspect="auto", **imshow_kwargs)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), labels=list(col_labels), rotation=60, ha="right")
    if annotate:
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_title(title)
    return ax


def loglog_slope(x, y) -> float:
    """The least-squares slope of log(y) against log(x): the exponent k in y ~ x^k."""
    lx, ly = np.log(_to_numpy(x)), np.log(_to_numpy(y))
    return float(np.polyfit(lx, ly, 1)[0])


def loglog_fit_plot(x, y, *, label: str = "measured", xlabel: str = "", ylabel: str = "", title: str = "", ax=None):
    """Measurements on log-log axes with the fitted power law. Returns (axes, slope)."""
    x_np, y_np = _to_numpy(x), _to_numpy(y)
    slope = loglog_slope(x_np, y_np)
    intercept = np.mean(np.log(y_np) - slope * np.log(x_np))
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    (points,) = ax.loglog(x_np, y_np, "o", label=label)
    ax.loglog(x_np, np.exp(intercept) * x_np**slope, "--", color=points.get_color(), label=f"fit: slope {slope:.2f}")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if len(x_np) <= 12:  # label the measured x values themselves: no crowded minor-tick labels
        ax.set_xticks(x_np, labels=[f"{v:g}" for v in x_np])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return ax, slope


def loss_curve(history: Sequence[Mapping], train_losses: Sequence[float] | None = None, *,
               title: str = "loss", ax=None):
    """Training curves from course_lib.training: the loss of every step (faint), and the
    evaluated train and validation losses (markers) against the optimizer step. Returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    if train_losses:
        steps = np.arange(1, len(train_losses) + 1)
        ax.plot(steps, train_losses, color="tab:blue", alpha=0.25, linewidth=0.8,
                label="train (each step)")
    if history:
        steps = [r["step"] for r in history]
        ax.plot(steps, [r["train_loss"] for r in history], "o-", color="tab:blue", markersize=4,
                label="train (evaluated)")
        ax.plot(steps, [r["val_loss"] for r in history], "s-", color="tab:orange", markersize=4,
                label="validation")
    ax.set(title=title, xlabel="optimizer step", ylabel="cross-entropy (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
