"""A resident server: a draft length it cannot draft is one line; the speed ratio against its
twin keeps its level at every number of blocks `conform --resident` allows, under drift and
noise, and finds a twin that costs 10% more."""

import json
import math

import numpy as np
import pytest

from tests.workloads.serving.engines import DFLASH
from workloads.serving.config import ServingError
from workloads.serving.resident import SpeedRatio, speed_ratio
from workloads.serving.vllm import EngineSettings, VllmServer


def _blocks(rng, count: int, slower: float, noise: float) -> list[tuple[float, float, float, float]]:
    """Walls of `count` blocks A B B A on a clock that drifts linearly (2% a load) with
    lognormal noise; the twin B costs `slower` times what A does."""
    out, t = [], 0
    for _ in range(count):
        block = []
        for twin in (False, True, True, False):
            drift = 1 + 0.02 * t
            block.append(drift * (slower if twin else 1.0) * math.exp(rng.normal(0, noise)))
            t += 1
        out.append(tuple(block))
    return out


@pytest.mark.parametrize("level", [0.95, 0.99])
def test_the_interval_contains_1_at_its_level_for_every_number_of_blocks(level):
    rng = np.random.default_rng(7)
    runs = 4000
    for count in range(2, 9):
        held = sum(speed_ratio(_blocks(rng, count, 1.0, 0.05), level).holds for _ in range(runs))
        # the level less three Monte Carlo standard errors
        assert held / runs >= level - 3 * math.sqrt(level * (1 - level) / runs), (count, held / runs)


def test_a_twin_that_costs_10_percent_more_is_found():
    rng = np.random.default_rng(11)
    found = [speed_ratio(_blocks(rng, 4, 1.1, 0.02)) for _ in range(200)]
    assert sum(not r.holds for r in found) >= 190
    assert all(1.05 < r.ratio < 1.15 for r in found)  # B's walls 10% longer: A 1.1x the speed


def test_one_block_is_refused_and_the_line_says_what_was_measured():
    with pytest.raises(ValueError):
        speed_ratio([(1.0, 1.0, 1.0, 1.0)])
    line = SpeedRatio(1.02, 0.95, 1.1, 4).line()
    assert line.strip() == ("speed, resident / started at k: 1.020 [0.950, 1.100] (99%, 4 blocks A B B A): "
                            "contains 1")


def test_a_draft_length_the_server_cannot_draft_is_one_line(tmp_path):
    """Above the n a resident server started with, or on a server not started resident."""
    settings = EngineSettings("verifier", json.dumps({"method": "dflash", "num_speculative_tokens": 7}))
    resident, plain = VllmServer(settings, tmp_path, resident=True), VllmServer(settings, tmp_path)
    with pytest.raises(ServingError) as above:
        resident.draft(9)
    assert str(above.value) == ("spec: draft length 9: the server drafts 1 to 7 tokens (started with "
                                "num_speculative_tokens 7)")
    with pytest.raises(ServingError) as fixed:
        plain.draft(3)
    assert str(fixed.value) == ("spec: draft length 3: the server drafts 1 to 7 tokens (it was not started "
                                "resident)")
    resident.draft(3)  # between loads: written for the plugin's scheduler
    assert (resident.dir / "draft_tokens").read_text() == "3" and resident.shape(DFLASH)[2] == 3
    plain.draft(7)  # its own n: nothing to change
