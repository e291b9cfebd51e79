"""course_lib.viz basics: plots build without a display and the log-log fit is right."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib import viz  # noqa: E402
from course_lib.viz.plots import loglog_slope  # noqa: E402


def test_loglog_slope_recovers_the_exponent():
    x = np.array([16, 32, 64, 128, 256])
    assert loglog_slope(x, 3.0 * x**2) == pytest.approx(2.0)
    assert loglog_slope(x, x**0.5) == pytest.approx(0.5)


def test_heatmap_labels_both_axes():
    ax = viz.heatmap(torch.rand(3, 4), row_labels=list("abc"), col_labels=list("wxyz"), title="t")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abc")
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    plt.close("all")


def test_heatmap_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D"):
        viz.heatmap(torch.rand(2, 2, 2))


def test_line_plot_draws_one_line_per_series():
    ax = viz.line_plot([1, 2, 3], {"a": [1, 2, 3], "b": [3, 2, 1]}, logy=True)
    assert len(ax.get_lines()) == 2
    assert ax.get_yscale() == "log"
    plt.close("all")


def test_loglog_fit_plot_returns_the_slope():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    _, slope = viz.loglog_fit_plot(x, x**2)
    assert slope == pytest.approx(2.0)
    plt.close("all")
