"""An export's SGLang flags read by SGLang's own parser (set up by `make vllm`)."""

import pytest

from orchestrator.analysis.serving import drafter_serving
from tests.needs_vllm import needs_vllm
from workloads.decoding.kinds import DFLASH
from workloads.models.pairspec import refs
from workloads.serving.config import ServingError
from workloads.serving.sglang_flags import check, flags, parser_path, settings

pytestmark = needs_vllm
TOY = refs("toy-dflash")
CONFIG = {"schedule": "linear", "steps": 1, "threshold": None, "rule": "lossless", "leniency": 0, "block": 8}


def exported(block: int = 8) -> list[str]:
    return drafter_serving(DFLASH, TOY["drafter"], {**CONFIG, "block": block})["sglang"]


def test_sglang_reads_an_exports_flags_as_meant_and_names_what_it_reads_otherwise():
    meant = settings("DFLASH", TOY["drafter"], 7)
    eagle3, draft = refs("toy-eagle3")["drafter"], refs("toy-draft")["drafter"]
    chains = [settings("EAGLE3", eagle3, 3), settings("STANDALONE", draft, 5),
              settings("DSPARK", refs("toy-dspark")["drafter"], 7),
              settings("DFLASH", refs("toy-dflash2")["drafter"], 7)]
    good, wrong_block, misspelt, *chained = check([
        (TOY["verifier"], exported(), meant),
        (TOY["verifier"], exported(4), meant),
        (TOY["verifier"], [f.replace("tokens", "tokenz") for f in exported()], meant),
        *[(TOY["verifier"], flags(chain), chain) for chain in chains],
    ])
    assert good["parser"] == "sglang 0.5.23"
    assert good["read"] == {"speculative_algorithm": "DFLASH", "speculative_draft_model_path": TOY["drafter"],
                            "speculative_num_draft_tokens": 8}
    assert wrong_block == {"error": "SGLang reads speculative_num_draft_tokens 4, not 8"}
    unknown = "sglang serve: error: unrecognized arguments: --speculative-num-draft-tokenz 8"
    assert misspelt["error"] == unknown
    assert [c["read"] for c in chained] == chains  # chains: n steps, top-k 1, n + 1; DSpark: block n


def test_a_missing_parser_is_one_line_saying_how_to_set_it_up(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSWEEP_SGLANG_PATH", str(tmp_path))
    with pytest.raises(ServingError, match=r"^sglang: SGLang's parser is not set up .*run `make vllm`"):
        parser_path()
