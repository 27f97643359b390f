import copy
from pathlib import Path

import pytest

from orchestrator.sweep.space import grid
from orchestrator.sweep.spec import SpecError, load_spec, parse_spec

BASE = {
    "name": "t",
    "pairs": ["toy"],
    "task": {"name": "arith", "limit": 4},
    "space": {
        "schedule": ["linear"],
        "block": [4],
        "steps": [1, 2],
        "rule": ["lossless", "linear"],
        "leniency": {"low": 0, "high": 1, "step": 0.5},
    },
    "objectives": {"throughput_tps": "max", "accuracy": "max"},
}


def spec_with(path: str, value):
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return data


def test_base_spec_is_valid_and_ranges_expand():
    spec = parse_spec(BASE)
    assert spec.dimension_values()["leniency"] == [0.0, 0.5, 1.0]
    assert spec.pair_kinds == {"toy": "two-model"}


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        ("colour", "red", "colour"),  # unknown top-level key
        ("search", {"sampler": "tpe", "trails": 3}, "search.trails"),  # unknown nested key
        ("search", {"trials": "many"}, "search.trials"),  # wrong type
        ("space.leniency", [0.5, 1.5], "space.leniency"),  # λ = 1.5
        ("space.delta", [-1], "space.delta"),
        ("space", {}, "space: empty"),
        ("space.flavour", [1], "space.flavour"),
        ("space.steps", [], "space.steps"),
        ("space.threshold", [1.5], "space.threshold"),
        ("space.schedule", ["quadratic"], "space.schedule"),
        ("task.name", "gsm9k", "task.name"),
        ("pairs", ["toy", "nosuchpair"], "pairs"),
        ("pairs", [{"name": "x", "drafter": "/no/such/dir", "verifier": "/no/such/dir"}], "pair.drafter"),
        ("objectives", {"accuracy": "max"}, "objectives"),
        ("objectives", {"accuracy": "max", "speed": "max"}, "speed"),
        ("constraints", ["accuracy > lots"], "constraints"),
        ("name", "bad name!", "name"),
        ("pairs", [{"name": "toy", "runtime_env": {"pip": ["transformers==4.57"]}}], "runtime_env"),
        ("cluster", {"slots": 0}, "cluster.slots"),
    ],
)
def test_bad_specs_name_the_offending_key(path, value, fragment):
    with pytest.raises(SpecError) as err:
        parse_spec(spec_with(path, value))
    message = str(err.value)
    assert fragment in message and "\n" not in message, message


@pytest.mark.parametrize("path", sorted(Path("sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_sweeps_parse_and_their_grids_fill_the_trials(path):
    spec = load_spec(path)
    if spec.search.sampler == "grid":
        assert len(grid(spec)) == spec.search.trials
