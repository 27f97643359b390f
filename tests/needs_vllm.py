"""The mark of tests that run vLLM for real (the CPU build `make vllm` installs): slow, and
skipped only where vLLM is not set up, saying how to set it up."""

import pytest

from workloads.serving.config import ServingError
from workloads.serving.venv import vllm_python


def _missing() -> str:
    try:
        vllm_python()
    except ServingError as err:
        return str(err)
    return ""


needs_vllm = [pytest.mark.slow, pytest.mark.skipif(bool(_missing()), reason=_missing())]


def on_vllm(test):
    """`needs_vllm` on one test of a module whose other tests need no vLLM."""
    for mark in needs_vllm:
        test = mark(test)
    return test
