"""The serving configuration the shared toy DFlash server (conftest) starts with."""

from workloads.serving.config import ServingConfig

DFLASH = ServingConfig(method="dflash", num_speculative_tokens=7, max_new_tokens=48)
