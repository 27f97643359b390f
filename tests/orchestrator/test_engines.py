"""The engines behind one interface (orchestrator/engines): chosen in one place, asked, never
named in a branch elsewhere."""

import ast
import dataclasses
from pathlib import Path

import pytest

from orchestrator.engines import DIMENSIONS, ENGINES, SPECSWEEP, VLLM, engine_of, space_error
from orchestrator.sweep.workers import PairWorker
from workloads.decoding.config import DecodeConfig
from workloads.decoding.kinds import KINDS
from workloads.serving.config import ServingConfig

ROOT = Path(__file__).resolve().parents[2]
NAMES = {"specsweep", "vllm", "sglang"}
OBJECTS = {"SPECSWEEP", "VLLM"}  # the engines, compared by identity
CLASSES = {"DecodeConfig", "ServingConfig", "SpecsweepEngine", "VllmEngine"}  # an engine's by type
HOME = ROOT / "orchestrator" / "engines"
SCANNED = (ROOT / "orchestrator", ROOT / "workloads" / "serving")


def test_every_config_class_names_a_registered_engine():
    assert ENGINES[DecodeConfig.engine] is SPECSWEEP and ENGINES[ServingConfig.engine] is VLLM


def test_a_config_or_its_stored_dict_finds_its_engine():
    served = ServingConfig(method="dflash", num_speculative_tokens=3)
    assert engine_of(served) is VLLM and engine_of(served.to_dict()) is VLLM
    assert engine_of(DecodeConfig()) is SPECSWEEP


def test_a_stored_config_without_an_engine_is_specsweeps():
    assert engine_of(DecodeConfig().to_dict()) is SPECSWEEP


def test_the_engine_axis_dimensions_are_engine_and_each_engines_own_settings():
    assert DIMENSIONS == ("engine", "method", "num_speculative_tokens", "concurrency", "request_rate",
                          "burstiness", "dspark_draft_topk", "enable_adaptive_verification")


def test_an_unknown_engine_is_refused_naming_the_known_ones():
    assert space_error({"engine": ["tgi"]}, racing=False) == ("spec: space.engine: 'tgi' is not an engine; "
                                                              "known: specsweep, vllm")


def test_an_engines_own_setting_needs_that_engine_listed():
    assert space_error({"concurrency": [4]}, racing=False) == ("spec: space.concurrency: a vLLM setting; "
                                                               "add vllm to space.engine")


def test_specsweeps_settings_are_refused_only_where_vllm_runs_alone():
    dims = {"engine": ["vllm"], "steps": [2], "method": ["none"]}
    assert space_error(dims, racing=False).startswith("spec: space.steps: 2 has no vLLM setting")
    assert space_error({**dims, "engine": ["specsweep", "vllm"]}, racing=False) is None


def test_each_engine_times_a_trial_against_its_own_control():
    ar = DecodeConfig(schedule="ar")
    served = ServingConfig(method="ngram", num_speculative_tokens=3, concurrency=4)
    assert SPECSWEEP.control(DecodeConfig(), ar) is ar
    assert VLLM.control(served, ar) == ServingConfig(concurrency=4)


def test_a_served_config_shares_its_start_with_other_draft_lengths_not_other_top_ks():
    dspark = ServingConfig(method="dspark", num_speculative_tokens=3, concurrency=4)
    longer = dataclasses.replace(dspark, num_speculative_tokens=7, concurrency=1)  # drafted at run time
    topk = dataclasses.replace(dspark, dspark_draft_topk=2)  # set at its start
    assert VLLM.start_key("p", dspark) == VLLM.start_key("p", longer) != VLLM.start_key("p", topk)
    assert VLLM.start_key("p", dspark) != VLLM.start_key("q", dspark)  # a server a pair
    assert SPECSWEEP.start_key("p", DecodeConfig()) is None


def test_only_a_served_engine_repeats_its_loads():
    assert SPECSWEEP.repeats(3) == 1 and VLLM.repeats(3) == 3


def test_each_engine_measures_a_shard_its_own_way():
    worker = PairWorker({"toy": "toy"}, "arith", sweep_seed=0)
    assert type(worker.measurer(SPECSWEEP)).__name__ == "Decoder"  # on the worker's resident pairs
    assert type(worker.measurer(VLLM)).__name__ == "Serving"  # on the worker's vLLM servers
    assert worker.measurer(VLLM) is worker.measurer(VLLM)  # made once a process, kept


@pytest.mark.parametrize("engine", list(ENGINES.values()), ids=list(ENGINES))
def test_a_registered_engine_keeps_the_contract(engine):
    """What every engine answers (engine.Engine), checked alike on each registered one: a
    candidate it chooses is its own, and so is its control; its configs read in tables; its
    own settings are space dimensions; its measurer starts nothing before its first shard."""
    kind = next(k for k in KINDS.values() if engine.pairs_error({}, {"p": k}) is None)
    dims = {"engine": [engine.name]}
    config, size = engine.choose(dims, kind, lambda name: dims[name][0], lambda name, values: values[0])
    assert engine_of(config) is engine and size >= 1
    assert engine.space_error(dims, racing=False, alone=True) is None
    control = engine.control(config, DecodeConfig(schedule="ar"))
    assert control is None or engine_of(control) in (engine, SPECSWEEP)
    assert engine.repeats(3) >= 1
    assert set(engine.columns(config.to_dict())) == {"schedule", "block", "effort", "rule", "leniency"}
    assert engine.label(config.to_dict()) and "toy" in engine.drift_key("toy")
    assert all(key in DIMENSIONS for key in engine.settings)
    start = engine.start_key("p", config)  # a served engine's start, hashable; none without a server
    assert (start is None) != engine.served and hash(start) == hash(engine.start_key("p", config))
    setting = engine.own_setting(config.to_dict(), None)
    assert (setting is None) == (engine.section is None)
    measurer = engine.measurer(PairWorker({"toy": "toy"}, "arith", sweep_seed=0))
    assert callable(measurer.measure)
    measurer.close()  # before any shard: nothing started, nothing to stop


def test_labels_name_vllms_drafts_n_and_specsweeps_steps_k():
    served = ServingConfig(method="dflash", num_speculative_tokens=7).to_dict()
    assert VLLM.label(served) == "dflash n=7" and VLLM.label(ServingConfig().to_dict()) == "none"
    lenient = DecodeConfig(schedule="linear", block=8, steps=1, rule="linear", leniency=0.5).to_dict()
    assert SPECSWEEP.label(lenient) == "linear B8 K=1 λ0.5"


def test_drift_reports_are_keyed_by_pair_and_served_engine():
    assert SPECSWEEP.drift_key("toy") == "toy" and VLLM.drift_key("toy") == "toy:vllm"


def test_only_vllm_writes_an_export_section():
    assert (SPECSWEEP.section, VLLM.section) == (None, "vllm")


def _name_branches(path: Path, root: Path = ROOT) -> list[str]:
    """Branches in `path` on which engine something is: a comparison against an engine's name
    (a literal name, alone or in a literal list, or anything compared with a config's `engine`:
    `x.engine`, `x["engine"]`, `x.get("engine")`), an identity test against an engine object
    (`is VLLM`) or an isinstance test against a config or engine class. Export keys read by
    subscript (`serving["vllm"]`, `VLLM.section in serving`) compare nothing."""

    def names_engine(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in NAMES
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return any(map(names_engine, node.elts))
        if isinstance(node, ast.Attribute):
            return node.attr == "engine"
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == "engine"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            first = node.args[0] if node.args else None
            return isinstance(first, ast.Constant) and first.value == "engine"
        return False

    def is_engine(node: ast.AST) -> bool:  # an engine object by name: VLLM, engines.SPECSWEEP
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return name in OBJECTS

    def branches(node: ast.AST) -> bool:
        if isinstance(node, ast.Compare):
            identity = any(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) and any(
                map(is_engine, [node.left, *node.comparators]))
            return identity or any(map(names_engine, [node.left, *node.comparators]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            kinds = node.args[1] if len(node.args) > 1 else None
            kinds = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            return any(isinstance(k, ast.Name) and k.id in CLASSES for k in kinds)
        return isinstance(node, ast.MatchValue) and names_engine(node.value)

    lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text())) if branches(node))
    return [f"{path.relative_to(root)}:{line}" for line in lines]


def test_the_scan_finds_name_branches_but_not_export_keys(tmp_path):
    source = tmp_path / "branches.py"
    source.write_text('a = config.engine == "vllm"\nb = "sglang" in serving\nc = c.get("engine") != x\n'
                      'd = serving["vllm"]\ne = {"vllm": 1}\nf = engines == ["vllm"]\n'
                      'g = engine_of(c) is VLLM\nh = isinstance(c, (int, ServingConfig))\n'
                      'i = VLLM.section in serving\nj = engines.SPECSWEEP is not e\n')
    assert _name_branches(source, tmp_path) == ["branches.py:1", "branches.py:2", "branches.py:3",
                                                "branches.py:6", "branches.py:7", "branches.py:8",
                                                "branches.py:10"]


def test_no_code_outside_the_engines_home_branches_on_an_engine_name():
    paths = [p for folder in SCANNED for p in sorted(folder.rglob("*.py")) if HOME not in p.parents]
    assert [where for path in paths for where in _name_branches(path)] == []
