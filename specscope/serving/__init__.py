"""Serving: the reference decoder behind an OpenAI-compatible API, and configuration sweeps.

``scheduler`` runs the continuous-batching loop in its own thread; ``api`` is the HTTP front
(FastAPI); ``sweep`` drives a grid of configurations against it, one run per point.
"""
