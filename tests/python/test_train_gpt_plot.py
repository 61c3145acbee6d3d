"""examples/train_gpt.py --plot: the PNG holds the train and the validation loss curves
(both colours drawn across most of the plot, not only in the legend), and the figure's
lines are the run's losses; --help shows the defaults."""

import subprocess
import sys

import matplotlib.image
import numpy as np

from test_train_gpt import SMALL, shakespeare, train_gpt

COLORS = {"train loss": "#1f77b4", "validation loss": "#ff7f0e"}  # matplotlib's C0, C1


def _rgb(hex_color):
    return np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def test_plot_writes_both_curves(tmp_path, capsys):
    png = tmp_path / "loss.png"
    args = ["--data", shakespeare(), *SMALL, "--device", "cpu", "--steps", "12"]
    result = train_gpt.train(
        train_gpt.parse_args([*args, "--eval-interval", "3", "--plot", str(png)])
    )
    assert f"wrote {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(str(png))[..., :3]
    height, width, _ = img.shape
    assert (width, height) == (700, 400)
    for label, color in COLORS.items():
        mask = np.abs(img - _rgb(color)).max(axis=-1) < 0.05
        cols = np.flatnonzero(mask.any(axis=0))
        assert cols.size, f"no {label} pixels"
        # the curve spans the steps (the legend's sample line is ~30 px wide)
        assert cols.max() - cols.min() > 0.5 * width, (label, cols.min(), cols.max())
    fig = train_gpt.plot_losses(tmp_path / "again.png", result)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["train loss"].get_ydata()) == result["train_loss"]
    assert list(lines["validation loss"].get_xdata()) == [3, 6, 9, 12] == result["val_steps"]
    assert list(lines["validation loss"].get_ydata()) == result["val_loss"]


def test_help_shows_the_defaults():
    out = subprocess.run(
        [sys.executable, train_gpt.__file__, "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--plot PLOT" in out and "(default: 600)" in out and "(default: ember)" in out
    assert "tinyshakespeare" in out
