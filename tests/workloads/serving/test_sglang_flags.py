"""An export's SGLang flags read by SGLang's own parser (set up by `make vllm`)."""

import pytest

from orchestrator.analysis.serving import dflash_serving
from tests.needs_vllm import needs_vllm
from workloads.decoding.kinds import DFLASH
from workloads.models.pairspec import refs
from workloads.serving.config import ServingError
from workloads.serving.sglang_flags import check, parser_path

pytestmark = needs_vllm
TOY = refs("toy-dflash")
CONFIG = {"schedule": "linear", "steps": 1, "threshold": None, "rule": "lossless", "leniency": 0, "block": 8}


def flags(block: int = 8) -> list[str]:
    return dflash_serving(DFLASH, TOY["drafter"], {**CONFIG, "block": block})["sglang"]


def test_sglang_reads_an_exports_flags_as_meant_and_names_what_it_reads_otherwise():
    good, wrong_block, misspelt = check([
        (TOY["verifier"], flags(), TOY["drafter"], 8),
        (TOY["verifier"], flags(4), TOY["drafter"], 8),
        (TOY["verifier"], [f.replace("tokens", "tokenz") for f in flags()], TOY["drafter"], 8),
    ])
    assert good["parser"] == "sglang 0.5.23"
    assert good["read"] == {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": TOY["drafter"],
                            "speculative_num_draft_tokens": 8}
    assert wrong_block == {"error": "SGLang reads speculative_num_draft_tokens 4, not 8"}
    unknown = "sglang serve: error: unrecognized arguments: --speculative-num-draft-tokenz 8"
    assert misspelt["error"] == unknown


def test_a_missing_parser_is_one_line_saying_how_to_set_it_up(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSWEEP_SGLANG_PATH", str(tmp_path))
    with pytest.raises(ServingError, match=r"^sglang: SGLang's parser is not set up .*run `make vllm`"):
        parser_path()
