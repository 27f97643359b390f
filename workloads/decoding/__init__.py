"""Speculative diffusion decoding: acceptance rules, drafting, schedules, measurements."""

from workloads.decoding.config import ConfigError, DecodeConfig, is_exact
from workloads.decoding.engine import MEASUREMENTS, DecodeResult, decode

__all__ = ["ConfigError", "DecodeConfig", "DecodeResult", "MEASUREMENTS", "decode", "is_exact"]
