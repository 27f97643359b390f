import optuna
import pytest

from orchestrator.spec.space import choose_config, grid
from orchestrator.spec.sweep import SpecError, parse_spec


def spec(space, pairs=("toy",)):
    return parse_spec(
        {
            "name": "s",
            "pairs": list(pairs),
            "task": {"name": "arith", "limit": 2},
            "space": space,
            "objectives": {"throughput_tps": "max", "accuracy": "max"},
        }
    )


def test_grid_covers_the_conditional_space_exactly_once():
    s = spec(
        {
            "block": [2, 4],
            "steps": [1, 2, 4],
            "rule": ["lossless", "linear", "cactus"],
            "leniency": [0.5, 1.0],
            "delta": [1.0],
        }
    )
    points = grid(s)
    configs = [choose_config(s, lambda name, values, p=p: p[name]).config for p in points]
    # B=2: K in {1, 2}; B=4: K in {1, 2, 4}; rules: lossless 1 + linear 2 + cactus 1 = 4
    assert len(points) == (2 + 3) * 4 == len(set(configs))
    assert all(c.steps <= c.block for c in configs)
    assert {c.leniency for c in configs if c.rule == "cactus"} == {1.0}
    assert {c.leniency for c in configs if c.rule == "lossless"} == {0.0}


def test_pairs_and_effort_kinds_are_dimensions():
    s = spec({"steps": [1], "threshold": [0.5, 0.9]}, pairs=("toy", "toy-self"))
    points = grid(s)
    assert len(points) == 2 * (1 + 2)
    assert {p["pair"] for p in points} == {"toy", "toy-self"}


def test_dual_mode_pairs_get_their_own_schedules_blocks_and_one_step_drafts():
    s = spec({"schedule": ["linear", "packed", "quadratic"], "block": [1, 4], "steps": [1, 2]},
             pairs=("toy", "toy-self"))
    configs = {}
    for p in grid(s):
        c = choose_config(s, lambda name, values, p=p: p[name])
        configs.setdefault(c.pair, []).append(c.config)
    # toy: linear/packed x B=1 (K=1) + B=4 (K in 1, 2); toy-self: linear B=4 x 2 K + packed + quadratic
    assert len(configs["toy"]) == 2 * 3 and "quadratic" not in {c.schedule for c in configs["toy"]}
    own = {(c.schedule, c.block, c.k) for c in configs["toy-self"]}
    assert own == {("linear", 4, 1), ("linear", 4, 2), ("packed", 4, 1), ("quadratic", 4, 1)}


def test_a_dflash_pair_gets_linear_and_packed_blocks_of_two_or_more_and_every_k():
    s = spec({"schedule": ["linear", "packed", "quadratic"], "block": [1, 4], "steps": [1, 2]},
             pairs=("toy-self", "toy-dflash"))
    own = {(c.config.schedule, c.config.block, c.config.k) for c in
           (choose_config(s, lambda name, values, p=p: p[name]) for p in grid(s)) if c.pair == "toy-dflash"}
    assert own == {(schedule, 4, k) for schedule in ("linear", "packed") for k in (1, 2)}


def test_quadratic_needs_a_dual_mode_pair():
    with pytest.raises(SpecError, match="space.schedule: quadratic needs a dual-mode"):
        spec({"schedule": ["quadratic"]})


def test_optuna_trials_walk_the_same_space():
    s = spec({"schedule": ["linear", "packed"], "block": [2, 4], "steps": [1, 2, 4]})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    keys = {tuple(sorted(p.items())) for p in grid(s)}
    for _ in range(30):
        trial = study.ask()
        candidate = choose_config(s, trial.suggest_categorical)
        assert tuple(sorted(trial.params.items())) in keys
        assert candidate.config.steps <= candidate.config.block
        study.tell(trial, 0.0)


def test_the_unmasking_policy_is_chosen_only_where_it_changes_the_draft():
    s = spec({"block": [4], "steps": [1, 2], "threshold": [0.5], "unmask": ["confidence", "ltr"]},
             pairs=("toy", "toy-self"))
    configs = [choose_config(s, lambda name, values, p=p: p[name]) for p in grid(s)]
    by_pair = {}
    for c in configs:
        by_pair.setdefault(c.pair, set()).add((c.config.k, c.config.threshold, c.config.unmask))
    # K = 1 keeps the first listed policy; K = 2 and τ = 0.5 try both
    assert by_pair["toy"] == {(1, None, "confidence"), (2, None, "confidence"), (2, None, "ltr"),
                              (None, 0.5, "confidence"), (None, 0.5, "ltr")}
    assert len(configs) == len({(c.pair, c.config) for c in configs})


def test_a_served_grid_starts_each_server_once_and_specsweeps_grid_keeps_its_order():
    """DSpark's draft top-k is a server setting, the draft length a run-time one: the grid runs
    each top-k's points together (two starts, not one a point), every start's points in a row,
    a start's points of one concurrency in a row (timed together);
    specsweep's points, which start nothing, stay in the order choose_config walks them."""
    from orchestrator.engines import engine_of
    from orchestrator.spec.space import candidate_of, in_start_order, together_key

    served = spec({"engine": ["vllm"], "method": ["dspark"], "num_speculative_tokens": [3, 7],
                   "concurrency": [1, 4], "dspark_draft_topk": [None, 2]}, pairs=("toy-dspark", "toy-dflash"))
    starts = []
    for params in grid(served):
        candidate = candidate_of(served, params)
        starts.append(engine_of(candidate.config).start_key(candidate.pair, candidate.config))
    runs = [key for at, key in enumerate(starts) if at == 0 or starts[at - 1] != key]
    assert len(runs) == len(set(starts)) == 2 + 1  # DSpark's two top-ks; the DFlash pair's control
    assert [p.get("dspark_draft_topk") for p in grid(served)[:4]] == [None] * 4
    # and within a start, the points of one control (concurrency) in a row: timed together
    together = [together_key(served, p) for p in grid(served)]
    runs = [key for at, key in enumerate(together) if at == 0 or together[at - 1] != key]
    assert len(runs) == len(set(together)) == 2 * 2 + 2  # two per top-k and per control: one a concurrency
    # a point its control's own server serves (no speculation) goes first with its control's
    # first start: timed together with it
    mixed = spec({"engine": ["vllm"], "method": ["dflash", "none"], "num_speculative_tokens": [3, 7],
                  "concurrency": [1, 4]}, pairs=("toy-dflash",))
    assert [(p["method"], p.get("num_speculative_tokens"), p["concurrency"]) for p in grid(mixed)] == [
        ("dflash", 3, 1), ("dflash", 7, 1), ("none", None, 1),
        ("dflash", 3, 4), ("dflash", 7, 4), ("none", None, 4)]
    decoded = spec({"block": [2, 4], "steps": [1, 2]}, pairs=("toy", "toy-self"))
    points = grid(decoded)
    assert in_start_order(decoded, points[::-1]) == points[::-1]
