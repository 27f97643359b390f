"""The mark of tests that run vLLM for real (the CPU build `make vllm` installs): slow, marked
`vllm` (the costliest tests a file holds: each vLLM server start is about 19 CPU-seconds here),
and skipped only where vLLM is not set up, saying how to set it up."""

import pytest

from workloads.serving.config import ServingError
from workloads.serving.venv import vllm_python


def _missing() -> str:
    try:
        vllm_python()
    except ServingError as err:
        return str(err)
    return ""


needs_vllm = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.skipif(bool(_missing()), reason=_missing())]


def on_vllm(test):
    """`needs_vllm` on one test of a module whose other tests need no vLLM."""
    for mark in needs_vllm:
        test = mark(test)
    return test
