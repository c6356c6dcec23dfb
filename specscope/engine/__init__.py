"""The reference speculative decoder (torch + transformers, the ``engine`` extra), hooks inside."""

from .config import FAULTS, SpecConfig
from .decoder import Output, Request, SpeculativeDecoder

__all__ = ["FAULTS", "Output", "Request", "SpecConfig", "SpeculativeDecoder"]
