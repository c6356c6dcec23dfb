"""Figures: pure functions from run views (report sections) to Plotly figures and table rows.

No Dash, no I/O: each takes data and returns a figure or rows, so tests call them directly.
"""

from __future__ import annotations

import plotly.graph_objects as go

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#17becf", "#bcbd22", "#7f7f7f")


def empty(message: str) -> go.Figure:
    """A figure that says why it is empty."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": 14, "color": "#666"})
    fig.update_layout(xaxis={"visible": False}, yaxis={"visible": False}, height=260,
                      margin={"l": 20, "r": 20, "t": 30, "b": 20})
    return fig


AXIS = {"gridcolor": "#ebedf0", "zeroline": False, "linecolor": "#c8ccd2"}


def styled(fig: go.Figure, title: str, height: int = 320) -> go.Figure:
    """Title, size and a light style (set explicitly: applying a named template costs ~10 ms
    per figure, most of a callback's budget)."""
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=height,
                      margin={"l": 50, "r": 20, "t": 40, "b": 40}, paper_bgcolor="white",
                      plot_bgcolor="white", font={"color": "#2a3f5f"},
                      legend={"orientation": "h", "y": -0.2})
    fig.update_xaxes(**AXIS)
    fig.update_yaxes(**AXIS)
    return fig


def short(label: str, n: int = 48) -> str:
    """``label`` cut to ``n`` characters in its middle: runs named alike keep the end that
    tells them apart (a rank, a configuration)."""
    if len(label) <= n:
        return label
    head = (n - 1) * 2 // 5
    return label[:head] + "…" + label[len(label) - (n - 1 - head):]
