"""Speculative diffusion decoding: acceptance rules, drafting, schedules, measurements."""

from workloads.decoding.config import ConfigError, DecodeConfig, is_exact
from workloads.decoding.engine import MEASUREMENTS, BatchResult, DecodeResult, decode, decode_batch

__all__ = ["BatchResult", "ConfigError", "DecodeConfig", "DecodeResult", "MEASUREMENTS", "decode",
           "decode_batch", "is_exact"]
