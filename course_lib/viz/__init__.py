"""Plots and interactive explorers used by the notebooks (matplotlib and ipywidgets)."""

from course_lib.viz.plots import heatmap, line_plot, loglog_fit_plot

__all__ = ["heatmap", "line_plot", "loglog_fit_plot"]
