"""The dashboard's pages. Each module has PATH, TITLE, ``layout()`` and ``register(app, ctx)``;
``specscope.dashboard.app`` registers them explicitly, in this order."""

from . import accuracy, compare, live, profile, regression, sweep, truth

PAGES = (live, truth, compare, sweep, regression, profile, accuracy)
