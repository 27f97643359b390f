"""What to try next: the spec's sampler, the duplicate rule, the model-guided start, and the
grid's remaining points (no decoding: studies are filled by hand)."""

import json

import optuna
import pytest

from orchestrator.search.samplers import (
    ask_untried,
    constrain,
    finished_trials,
    guided_start,
    make_sampler,
    remaining_grid,
    replacement,
    tried_keys,
)
from orchestrator.spec.space import choose_config, grid, params_key
from orchestrator.spec.sweep import parse_spec

SPEC = {
    "name": "t",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 4},
    "space": {"schedule": ["linear", "packed"], "block": [2, 4], "steps": [1, 2],
              "rule": ["lossless", "linear"], "leniency": [0.5, 1.0], "max_new_tokens": 24},
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
    "search": {"sampler": "random", "trials": 5, "seed": 1},
}


@pytest.mark.parametrize(("name", "kind"), [("grid", "RandomSampler"), ("random", "RandomSampler"),
                                            ("tpe", "TPESampler"), ("nsga2", "NSGAIISampler"),
                                            ("gp", "GPSampler")])
def test_the_spec_names_the_sampler(name, kind):
    spec = parse_spec({**SPEC, "search": {**SPEC["search"], "sampler": name}})
    assert type(make_sampler(spec)).__name__ == kind


@pytest.mark.parametrize("name", ["tpe", "nsga2", "gp"])
def test_constraints_reach_every_sampler_through_optuna_without_a_deprecated_argument(name, recwarn):
    spec = parse_spec({**SPEC, "constraints": ["accuracy >= 0.5"],
                       "search": {**SPEC["search"], "sampler": name}})
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(spec))
    trial = study.ask()
    constrain(trial, [0.25])
    study.tell(trial, [1.0, 0.25])
    (told,) = study.get_trials()
    assert told.constraints == {"constraint 0": 0.25} and told.user_attrs["constraints"] == [0.25]
    study.ask()  # the sampler reads it
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


def test_the_replacement_of_a_duplicate_is_untried_and_reproducible():
    space = grid(parse_spec(SPEC))
    assert replacement(space, 7) == replacement(space, 7)
    assert replacement(space[:1], 3) == space[0]


def test_a_duplicate_proposal_is_pruned_and_an_untried_point_asked_instead():
    spec = parse_spec(SPEC)
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(spec))
    space = grid(spec)
    study.enqueue_trial(space[0])
    first = params_key(space[0])
    trial, candidate = ask_untried(study, spec, lambda key, _: key == first, lambda: space[1:2])
    assert trial.params == space[1] and candidate.config.block == space[1].get("block", 4)
    duplicate = study.trials[0]
    assert duplicate.state == optuna.trial.TrialState.PRUNED and duplicate.user_attrs["duplicate"]
    assert ask_untried(study, spec, lambda key, _: True, lambda: []) is None  # nothing left


def test_tried_and_remaining_grid_count_what_is_finished_or_waiting_but_not_the_interrupted():
    spec = parse_spec(SPEC)
    space = grid(spec)
    study = optuna.create_study(directions=["maximize", "maximize"])
    for params, state in ((space[0], "COMPLETE"), (space[1], "FAIL"), (space[2], "interrupted")):
        study.enqueue_trial(params)
        trial = study.ask()
        choose_config(spec, trial.suggest_categorical)
        if state == "interrupted":
            trial.set_user_attr("interrupted", True)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif state == "FAIL":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, [1.0, 1.0])
    study.enqueue_trial(space[3])
    assert tried_keys(study) == {params_key(space[0]), params_key(space[1])}
    assert len(finished_trials(study)) == 2
    remaining, waiting = remaining_grid(study, space)
    assert waiting == 1 and remaining == [space[2], *space[4:]]


def test_model_guided_start_takes_the_predicted_frontier_first(tmp_path):
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"steps": [1, 2], "d_k": [0.5, 0.3], "draft_cost": [0.001, 0.002],
                                       "verify_cost": 0.003, "block": 4}))
    spec = parse_spec({**SPEC, "search": {"sampler": "tpe", "trials": 8, "guide": str(calibration)}})
    start = guided_start(spec, grid(spec), set(), 8)
    assert 1 <= len(start) <= 4
    assert any(p.get("rule") == "linear" and p.get("leniency") == 1.0 for p in start)  # the fastest
    assert any(p.get("rule") == "lossless" for p in start)  # the most faithful
    tried = {params_key(p) for p in start}
    assert not tried & {params_key(p) for p in guided_start(spec, grid(spec), tried, 8)}
