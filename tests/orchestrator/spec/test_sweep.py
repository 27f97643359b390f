import copy
from pathlib import Path

import pytest
import yaml

from orchestrator.spec.file import load_spec
from orchestrator.spec.space import grid
from orchestrator.spec.sweep import SpecError, parse_spec

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
    assert {name: kind.name for name, kind in spec.pair_kinds.items()} == {"toy": "two-model"}


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
        ("constraints", ["accuracy >= 1e999"], "'accuracy >= 1e999': 1e999 is not a finite number"),
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


def refused_quickly(call, budget_s: float = 5.0, budget_mb: float = 50.0) -> str:
    """The SpecError message of `call`, which must come within the time and memory budget."""
    import time
    import tracemalloc

    tracemalloc.start()
    begin = time.perf_counter()
    try:
        with pytest.raises(SpecError) as err:
            call()
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    assert time.perf_counter() - begin < budget_s and peak < budget_mb, (time.perf_counter() - begin, peak)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300, message[:300]
    return message


def test_nested_yaml_aliases_are_refused_before_they_expand(tmp_path):
    """A 500-byte spec whose anchors nest seven deep stands for 5 million nodes (each level
    ×9); it is refused on its composed graph, naming the key, without building them."""
    node = "&a0 [" + ", ".join(["lol"] * 9) + "]"
    for i in range(1, 7):
        node = f"&a{i} [{node}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**BASE, "space": {"schedule": ["linear"]}}).replace(
        "space:\n", f"space:\n  temperature: {node}\n"))
    assert path.stat().st_size < 600
    message = refused_quickly(lambda: load_spec(path))
    assert message == ("spec: space.temperature: 5,380,840 YAML nodes with its aliases (*name) expanded; "
                       "at most 100,000")


def test_an_alias_inside_the_node_it_names_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(BASE).replace("space:\n", "space:\n  temperature: &t [0, *t]\n"))
    assert refused_quickly(lambda: load_spec(path)).startswith("spec: line ")


def test_a_spec_file_past_256_kib_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(BASE) + "# padding\n" * 30_000)
    size = path.stat().st_size
    message = refused_quickly(lambda: load_spec(path))
    assert message == f"spec: {path} is {size:,} bytes; a spec is at most 262,144"


@pytest.mark.parametrize("rng, count", [
    ({"low": 0, "high": 1, "step": 1e-6}, "1,000,001"),
    ({"low": -1e308, "high": 1e308, "step": 1}, "over 1e+308"),  # the width overflows a float
    ({"low": 0, "high": 1e300, "step": 1e-300}, "over 1e+308"),
])
def test_a_range_of_more_than_10000_values_is_counted_and_refused_before_it_is_built(rng, count):
    message = refused_quickly(lambda: parse_spec(spec_with("space.temperature", rng)))
    assert message == (f"spec: space.temperature: the range holds {count} values ((high - low) / step + 1); "
                       "at most 10,000 a dimension: widen the step")


def test_a_list_of_more_than_10000_values_is_refused():
    message = refused_quickly(lambda: parse_spec(spec_with("space.max_new_tokens", [8] * 10_001)))
    assert message == "spec: space.max_new_tokens: 10,001 values; at most 10,000 a dimension"


def test_a_space_of_more_than_100000_configurations_is_refused_before_it_is_enumerated():
    space = {"schedule": ["linear"], "temperature": [0.1 * i for i in range(10)], "top_k": list(range(1, 11)),
             "top_p": [0.1 * i + 0.05 for i in range(10)], "draft_top_k": list(range(1, 11)),
             "draft_temperature": [0.1 * i for i in range(10)], "max_new_tokens": list(range(8, 18))}
    message = refused_quickly(lambda: parse_spec({**BASE, "space": space}))
    assert message.startswith("spec: space: 1,000,000 configurations (10 temperature x 10 top_k x "), message
    assert message.endswith("; at most 100,000: list fewer values")
