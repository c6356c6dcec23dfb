"""The reference speculative decoder (torch + transformers, the ``engine`` extra), hooks inside."""

from .decoder import FAULTS, Output, Request, SpecConfig, SpeculativeDecoder

__all__ = ["FAULTS", "Output", "Request", "SpecConfig", "SpeculativeDecoder"]
