"""The Dash dashboard (the ``dashboard`` extra). Imports collector and exporters, never hooks."""
