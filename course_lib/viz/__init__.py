"""Plots and interactive explorers used by the notebooks (matplotlib and ipywidgets)."""

from course_lib.viz.attention import attention_explorer, attention_heads_grid, attention_heatmap
from course_lib.viz.plots import heatmap, line_plot, loglog_fit_plot, loss_curve
from course_lib.viz.tokens import token_pieces, token_spans_html, tokenizer_playground

__all__ = [
    "attention_explorer", "attention_heads_grid", "attention_heatmap",
    "heatmap", "line_plot", "loglog_fit_plot", "loss_curve",
    "token_pieces", "token_spans_html", "tokenizer_playground",
]
