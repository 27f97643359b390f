"""One vLLM server over the toy DFlash export (7 drafts a verification), shared by the serving
tests that need it, and the prompts they decode."""

import pytest

from tests.workloads.serving.engines import DFLASH
from workloads.models.pair import load_pair
from workloads.models.pairspec import BUNDLED
from workloads.serving.vllm import EngineSettings, VllmServer
from workloads.tasks import get_task


@pytest.fixture(scope="session")
def dflash_server():
    engine = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH))
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def arith():
    """The toy DFlash pair, 8 arith prompts and their token ids."""
    pair = load_pair("toy-dflash")
    examples = get_task("arith").examples("test", n=8)
    return pair, [e.prompt for e in examples], [pair.tokenizer(e.prompt).input_ids for e in examples]
