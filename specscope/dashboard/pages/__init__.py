"""The dashboard's pages. Each module has PATH, TITLE, ``layout()``, ``register(app, ctx)`` and SHOWS (what it must show, for which runs);
``specscope.dashboard.app`` registers them explicitly, in this order."""

from . import accuracy, compare, live, profile, regression, requests, sweep, truth

PAGES = (live, truth, requests, compare, sweep, regression, profile, accuracy)
