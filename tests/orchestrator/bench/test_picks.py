import pytest

from orchestrator.bench.picks import pair_and_prompts


def test_sweeps_that_pick_from_different_pairs_are_refused_before_anything_is_read(tmp_path):
    refusal = r"^sweeps: they pick from different pairs \(toy-dflash, toy-eagle3\)$"
    with pytest.raises(ValueError, match=refusal):
        pair_and_prompts(tmp_path, ["grid", "search"], {"toy-eagle3", "toy-dflash"})
