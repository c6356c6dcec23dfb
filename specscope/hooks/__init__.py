"""Hooks that run inside the engine's verify path. Imports only stdlib and torch.

Never imports dash, pandas, pyarrow or prometheus_client: an engine process pays for torch only.
"""

from .recorder import Recorder, Sink, every_n, every_step
from .syncguard import SyncError, forbid_sync

__all__ = ["Recorder", "Sink", "SyncError", "every_n", "every_step", "forbid_sync"]
