"""What every chart of every page shares: plotly.js (its basic bundle, inlined once per page),
a figure as HTML, the layout (legend beside the plot, margins that fit the labels), a palette
of colours that read apart, and numbers rounded to what a chart can show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import plotly.graph_objects as go

#: Draws each chart when it comes near the window, so that a page of many charts opens at once
#: (``ddpprofDrawAll()`` draws every one: printing, tests).
DRAW_WHEN_SEEN = """
function ddpprofDraw(div) {
  if (div.dataset.drawn) { return; }
  div.dataset.drawn = "1";
  var spec = JSON.parse(div.previousElementSibling.textContent);
  Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true});
}
window.ddpprofDrawAll = function () {
  document.querySelectorAll("div.chart").forEach(ddpprofDraw);
};
window.addEventListener("beforeprint", window.ddpprofDrawAll);
document.addEventListener("DOMContentLoaded", function () {
  var charts = document.querySelectorAll("div.chart");
  if (!("IntersectionObserver" in window)) { charts.forEach(ddpprofDraw); return; }
  var near = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) { near.unobserve(entry.target); ddpprofDraw(entry.target); }
    });
  }, {rootMargin: "600px"});
  charts.forEach(function (chart) { near.observe(chart); });
});
"""


def plotly_js() -> str:
    """plotly.js's basic bundle (bar, scatter and pie: every chart here), shipped beside the
    templates (``templates/plotly-basic.LICENSE.txt`` says where it comes from), and what
    draws the charts as they come into view: a page inlines it once, a third of the full
    library."""
    bundle = resources.files("ddpprof").joinpath("templates", "plotly-basic.min.js")
    return bundle.read_text() + DRAW_WHEN_SEEN


def embed(fig: go.Figure) -> str:
    """A figure as its data (JSON, in a script that does not run) and the div it is drawn in
    when it comes into view, as tall as the figure will be; plotly.js itself is inlined once
    per page."""
    spec = fig.to_json().replace("</", "<\\/")   # a "</script>" in a name cannot end it
    height = fig.layout.height or 450
    return (f'<script type="application/json">{spec}</script>'
            f'<div class="chart" style="height:{int(height)}px"></div>')


def generated() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def layout(fig: go.Figure, title: str, **kwargs: Any) -> go.Figure:
    """The look every chart shares: the legend right of the plot, in a column (never over a
    title or an axis title, however many series), margins that grow to fit the labels, the
    figure as wide as its cell."""
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"),
                      template="plotly_white", height=kwargs.pop("height", 380),
                      margin=dict(l=60, r=20, t=60, b=50), autosize=True,
                      legend=dict(orientation="v", x=1.02, xanchor="left", y=1.0,
                                  yanchor="top", traceorder="normal"),
                      **kwargs)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


#: Colours for series that have no colour of their own: 48 that read apart.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
           "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#6baed6",
           "#fd8d3c", "#74c476", "#9e9ac8", "#969696", "#9ecae1", "#fdae6b", "#a1d99b",
           "#bcbddc", "#bdbdbd", "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194",
           "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd", "#9c9ede", "#cedb9c",
           "#e7cb94", "#e7969c", "#de9ed6", "#c6dbef", "#fdd0a2", "#c7e9c0")


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def rounded(values: Sequence[float | None], digits: int = 3) -> list[float | None]:
    """Numbers as a chart needs them (µs in ms: 3 digits): the page carries no more."""
    return [None if v is None else round(v, digits) for v in values]
