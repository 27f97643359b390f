"""The vLLM search's steps: one untimed batch per profile (shared by the configurations it
stands for), then timings; a request that fails leaves the search for good, so it ends."""

from orchestrator.search.servingfidelity import ServingFidelity
from orchestrator.search.strategy import Measured
from workloads.serving.config import ServingConfig


def record(index, accepted):
    return {"index": index, "token_ids": list(range(9)), "iterations": 3, "drafted": 9, "accepted": accepted}


def search():
    configs, proxies = {}, {}
    for c in (1, 4):
        for method, n in (("none", 0), ("ngram", 3), ("dflash", 3)):
            key = (("concurrency", c), ("method", method), ("num_speculative_tokens", n))
            configs[key] = "toy-dflash", ServingConfig(method, n, concurrency=c)
            proxies[key] = "ar" if method != "dflash" else ("linear", 4)
    return ServingFidelity(configs, proxies, lambda pair, i: [1, 2, 3], total=2, tolerance=0.05, error=0.15)


def test_profiles_first_one_batch_each_then_timings_and_a_failed_timing_is_never_asked_again():
    state = search()
    profiles = state.step()
    assert sorted(map(str, (r.config for r in profiles))) == ["('linear', 4)", "ar"]
    assert not any(r.timed for r in profiles)
    for r in profiles:
        state.tell(r, Measured([record(0, 5), record(1, 5)], 1.0))
    assert len(state.profiles) == 6 and state.spent["profile"] == 2.0
    asked = []
    while step := state.step():
        assert all(r.timed for r in step) and not set(r.key for r in step) & set(asked)
        for r in step:
            asked.append(r.key)
            state.tell(r, Measured([], 1.0, error="engine died"))
    assert asked and all(state.stopped[k].startswith("failed") for k in asked)
    assert set(state.stopped) == set(state.configs)  # every configuration decided, none timed


def test_a_failed_profile_takes_every_configuration_it_stood_for_out():
    state = search()
    profiles = state.step()
    for r in profiles:
        if r.config == "ar":
            state.tell(r, Measured([], 1.0, error="weights did not load"))
        else:
            state.tell(r, Measured([record(0, 5), record(1, 5)], 1.0))
    assert sum(v.startswith("failed") for v in state.stopped.values()) == 4  # none and ngram, both c
    step = state.step()
    assert step and all(state.configs[r.key][1].method == "dflash" for r in step)
