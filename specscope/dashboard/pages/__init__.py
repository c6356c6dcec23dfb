"""The dashboard's pages. Each module has PATH, TITLE, ``layout()`` and ``register(app, ctx)``;
``specscope.dashboard.app`` registers them explicitly, in this order."""

from . import accuracy, compare, live, profile, regression, requests, sweep, truth

PAGES = (live, truth, requests, compare, sweep, regression, profile, accuracy)
