"""The dashboard's plots: matplotlib figures rendered to inline SVG (no pyplot, no display; the
`server` extra installs matplotlib, imported here only, when a page is drawn)."""

from __future__ import annotations

import io
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from serving.dashboard._views import Views

COLOURS = {
    "edge": "#2a9d8f",
    "edge_with_cloud_fallback": "#e9c46a",
    "cloud": "#264653",
    "failed": "#e76f51",
    "unknown": "#999999",
}
_drawing = threading.Lock()  # matplotlib's font cache and text layout are shared between threads


def _label(name: str) -> str:
    """A name from the records (a zone, an endpoint) as a plot label, shown as it is: control characters
    escaped (printable), `$` not read as mathtext, a leading `_` not taken as "leave out of the legend"."""
    from serving.monitoring._outcome_log import printable

    text = printable(name).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def _svg(figure: Figure, salt: str) -> str:
    """The figure as an <svg> element (no XML prolog), ids salted per figure: figures on one page never share one."""
    from matplotlib import rc_context

    buffer = io.StringIO()
    with rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        # no metadata: nothing that names a place elsewhere, and the same figure gives the same text
        figure.savefig(
            buffer,
            format="svg",
            bbox_inches="tight",
            metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
        )
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _stacked(axes: Axes, views: Views, series: Mapping[str, Sequence[int]], title: str) -> None:
    """Bars per time bucket of `views` (UTC), one colour per series, stacked."""
    positions = list(range(len(views.buckets)))
    bottom = [0] * len(views.buckets)
    for name, counts in series.items():
        axes.bar(positions, counts, width=0.9, bottom=bottom, label=_label(name), color=COLOURS.get(name))
        bottom = [b + c for b, c in zip(bottom, counts)]
    ticks = positions[:: max(1, -(-len(positions) // 4))]
    shown = "%H:%M:%S" if views.bucket_s < 60 else "%m-%d %H:%M" if views.bucket_s < 86400 else "%Y-%m-%d"
    axes.set_xticks(ticks, [time.strftime(shown, time.gmtime(views.buckets[i])) for i in ticks], fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.set_ylabel("requests")
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)


def mix_plot(views: Views) -> str:
    """Requests per time bucket, stacked by zone (left) and by serving endpoint (right)."""
    from matplotlib.figure import Figure

    with _drawing:
        figure = Figure(figsize=(10, 2.8))
        left, right = figure.subplots(1, 2)
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(views.start))
        _stacked(left, views, views.zones_over_time, f"zone, per {views.bucket_s} s from {when}")
        _stacked(right, views, views.served_over_time, "served by")
        return _svg(figure, "mix")


def latency_plot(views: Views) -> str:
    """p50, p90, p99 per endpoint, milliseconds, grouped bars."""
    import numpy as np
    from matplotlib.figure import Figure

    with _drawing:
        figure = Figure(figsize=(5, 2.8))
        axes = figure.subplots()
        positions = np.arange(len(views.latency))
        percentiles = sorted(views.latency[0].percentiles_ms) if views.latency else []
        step = 0.8 / max(1, len(percentiles))
        for i, p in enumerate(percentiles):
            axes.bar(positions + i * step, [row.percentiles_ms[p] for row in views.latency], width=step, label=f"p{p}")
        axes.set_xticks(positions + step * (len(percentiles) - 1) / 2, [_label(row.endpoint) for row in views.latency])
        axes.set_ylabel("ms per call")
        axes.set_title("latency by endpoint", fontsize=10)
        axes.legend(fontsize=8, frameon=False)
        return _svg(figure, "latency")
