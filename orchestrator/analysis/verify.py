"""An export checked in the serving engines. In vLLM: its `speculative_config` loaded as
written, and the first of the sweep's prompts decoded greedily, each held to what the sweep
measured (the trial's logged records): the same tokens, and the same drafts, drafted and
accepted tokens.

A trial measured in vLLM above concurrency 1 counted its drafts per load (sweep.serving), so
its prompts are compared one by one on tokens and load by load on the counters.

SGLang's flags are read by SGLang's own parser (workloads.serving.sglang_flags).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from orchestrator.analysis.export import is_export
from orchestrator.analysis.serving import SGLANG
from orchestrator.engines import VLLM, engine_of
from workloads.models.families import pair_kind
from workloads.models.pair import load_tokenizer
from workloads.models.pairspec import refs
from workloads.serving.config import EngineFailure, ServingConfig, ServingError
from workloads.serving.conformance import Conformance, Decoded, compare, served
from workloads.serving.load import serve
from workloads.serving.served import differences, option_args
from workloads.serving.sglang_flags import check, settings
from workloads.serving.vllm import EngineSettings, VllmServer, supervised


class ExportError(ValueError):
    """An export whose vLLM setting is malformed (edited by hand): bad input, not unservable."""


def read_export(path: Path) -> dict:
    """An export's mapping, read with the spec files' safe, bounded loader (one-line errors)."""
    from orchestrator.documents import read_document

    document = read_document(path, "export")
    if not isinstance(document, dict):
        raise ExportError(f"export: {path} must hold a mapping (pair, config, serving, ...)")
    return document


def serving_config(document: dict) -> ServingConfig:
    """The load an export's vLLM setting serves: its method and drafts, the measured length,
    sampling and stop strings; ServingError naming why it cannot be verified, ExportError
    naming the field of a setting that is there but malformed."""
    serving = document.get("serving") or {}
    speculative = serving.get(VLLM.section, {}).get("speculative_config")
    if not speculative:
        why = "; ".join(serving.get("specsweep_only", [])) or ("no drafts" if VLLM.section in serving else
                                                                "vLLM serves no drafter of this pair")
        raise ServingError(f"verify: this export has no vLLM speculative_config ({why})")
    config = document["config"]
    if config.get("temperature", 0) != 0:
        raise ServingError(f"verify: measured at temperature {config['temperature']}; vLLM is checked on "
                           "greedy tokens (temperature 0)")
    try:
        return ServingConfig(method=speculative.get("method"), max_new_tokens=config["max_new_tokens"],
                             num_speculative_tokens=speculative.get("num_speculative_tokens"),
                             stop=tuple(config.get("stop") or ()))
    except (ServingError, AttributeError, TypeError) as err:
        raise ExportError(f"export: serving.vllm.speculative_config: {err}") from None


def _by_load(decoded: list[Decoded], records: list[dict]) -> tuple[list[Decoded], list[str]]:
    """Decoded summed over each load (records sharing `batch`): tokens joined, counters added."""
    loads: dict[int, list[tuple[dict, Decoded]]] = {}
    for record, one in zip(records, decoded):
        loads.setdefault(record["batch"], []).append((record, one))
    out, labels = [], []
    for members in loads.values():
        counters = (sum(getattr(d, n) for _, d in members) for n in ("iterations", "drafted", "accepted"))
        out.append(Decoded(tuple(t for _, d in members for t in d.token_ids), *counters))
        labels.append(f"prompts {members[0][0]['index']}-{members[-1][0]['index']}")
    return out, labels


def per_load(config: dict) -> bool:
    """Whether a trial counted its drafts per load, not per prompt: served (vLLM) above
    concurrency 1."""
    return engine_of(config).served and config.get("concurrency", 1) > 1


def first_records(records: list[dict], n: int, whole_loads: bool = False) -> list[dict]:
    """The first `n` records by index; `whole_loads`: and the rest of the last one's load
    (records sharing `batch`, counted together)."""
    ordered = sorted(records, key=lambda r: r["index"])
    chosen = ordered[:n]
    if not whole_loads:
        return chosen
    return chosen + [r for r in ordered[n:] if chosen and r["batch"] == chosen[-1]["batch"]]


@contextlib.contextmanager
def _serving(pair: str | dict, speculative: dict, logs: Path | None,
             config_file: Path | None = None) -> Iterator[VllmServer]:
    """A vLLM server over `pair`'s verifier with an export's `speculative_config`, as written
    (started from its `vllm serve --config` file where one is given), logging under `logs`."""
    settings = EngineSettings(refs(pair)["verifier"], json.dumps(speculative),
                              config_file=None if config_file is None else str(config_file))
    server = VllmServer(settings, logs)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def prompt_ids(pair: str | dict, prompts: list[str]) -> list[list[int]]:
    tokenizer = load_tokenizer(pair)
    return [tokenizer(p, verbose=False).input_ids for p in prompts]


def verify(document: dict, records: list[dict], logs: Path | None = None,
           config_file: Path | None = None) -> tuple[Conformance, list[str] | None]:
    """Serve `records`' prompts (the trial's logged records, in index order) one at a time on a
    vLLM server started with the export's setting (supervised), from its `vllm serve --config`
    file where one is given; compare each with its record. Also each option of that file the
    served engine did not take (served.differences; None without a file or where its log shows
    no arguments)."""
    config = serving_config(document)
    ids = prompt_ids(document["pair"], [r["prompt"] for r in records])
    speculative = document["serving"][VLLM.section]["speculative_config"]
    with _serving(document["pair"], speculative, logs, config_file) as server:
        theirs = supervised(server, lambda: served(server, ids, config))
        kernel_check = server.kernel_check()
        taken = None
        if config_file is not None and server.engine_args is not None:
            taken = differences(option_args(yaml.safe_load(config_file.read_text())), server.engine_args)
    ours = [Decoded.of(r) for r in records]
    if per_load(document["config"]):
        (ours, labels), (theirs, _) = _by_load(ours, records), _by_load(theirs, records)
    else:
        labels = [f"prompt {r['index']}" for r in records]
    return compare(ours, theirs, config, kernel_check, reference="measured", labels=labels), taken


def verify_schedule(pair: str | dict, speculative: dict, prompts: list[str], logs: Path | None = None) -> str:
    """Load an n-by-batch-size `speculative_config` in vLLM and serve `prompts` one at a time
    (batch size 1): each verification must draft the n (num_speculative_tokens) of the range
    holding 1. One line."""
    ranges = speculative["num_speculative_tokens_per_batch_size"]
    ids = prompt_ids(pair, prompts)
    config = ServingConfig(method=speculative["method"], max_new_tokens=16,
                           num_speculative_tokens=speculative["num_speculative_tokens"])
    with _serving(pair, speculative, logs) as server:
        alone, _ = supervised(server, lambda: serve(server, ids, config))
    want = ranges[0][2]
    drafted = [s.counters.drafted / max(s.counters.iterations, 1) for s in alone]
    if any(d != want for d in drafted):
        raise ServingError(f"verify: vLLM loaded num_speculative_tokens_per_batch_size {ranges} but drafted "
                           f"{sorted(set(drafted))} a verification at batch size 1, not {want}")
    return (f"vLLM loaded num_speculative_tokens_per_batch_size {ranges} (num_speculative_tokens "
            f"{speculative['num_speculative_tokens']}) and drafted {want} a verification at batch size 1, "
            f"as the first range says, on {len(alone)} prompts")


def verify_exports(out: Path, written: list[Path], uri: str, n: int, say: Callable[[str], None],
                   logs: Path | None = None) -> bool:
    """Verify each written config in vLLM on its trial's first `n` prompts and write what it
    found into the file (`serving.vllm.verified`; where vLLM failed under the check twice, why
    it is not verified); load by_batch_size.yaml's drafts schedule where it has one. Servers
    log under `logs`. One line each; whether every check passed."""
    from orchestrator.files import write_yaml
    from orchestrator.stored import logged_records, store_client

    client, passed = store_client(uri), True
    for path in filter(is_export, written):
        document = read_export(path)
        try:
            serving_config(document)
        except ServingError as err:
            say(f"{path.name}: not verified: {str(err).removeprefix('verify: ')}")
            continue
        except ExportError as err:
            raise ExportError(f"export: {path}: {str(err).removeprefix('export: ')}") from None
        records = logged_records(client, document["provenance"]["mlflow_run_id"]) or []
        options = path.with_name(path.stem + ".vllm.yaml")
        try:
            result, taken = verify(document, first_records(records, n, per_load(document["config"])), logs,
                                   options if options.is_file() else None)
        except EngineFailure as err:
            document["serving"][VLLM.section]["verified"] = f"not verified: {err}"
            write_yaml(path, document)
            say(f"{path.name}: not verified: {err}")
            passed = False
            continue
        document["serving"][VLLM.section]["verified"] = result.summary()
        if taken is not None:  # `vllm serve --config` of the file beside it: every option taken
            document["serving"][VLLM.section]["verified"]["options_not_served"] = taken
        write_yaml(path, document)
        say(f"{path.name}: " + ("; ".join(line.strip() for line in result.lines()[:3])
                                if result.passed else "\n  ".join(result.lines())))
        if taken is not None:
            say(f"{options.name}: " + (f"FAIL: vllm serve --config did not serve {'; '.join(taken)}" if taken
                                       else "vllm serve --config served every option as written"))
        passed &= result.passed and not taken
    table = read_export(out / "by_batch_size.yaml")
    if VLLM.section in table:
        first = next(iter(table["by_batch_size"].values()))
        records = logged_records(client, first["provenance"]["mlflow_run_id"]) or []
        say("by_batch_size.yaml: " + verify_schedule(first["pair"], table[VLLM.section]["speculative_config"],
                                                     [r["prompt"] for r in records[:n]], logs))
    return passed


def check_sglang_exports(written: list[Path], say: Callable[[str], None]) -> bool:
    """Read each written config's SGLang flags with SGLang's parser and write what it read into
    the file (`serving.sglang_checked`). One line each; whether SGLang read every one as meant."""
    from orchestrator.files import write_yaml

    documents = {p: read_export(p) for p in filter(is_export, written)}
    servable = {p: d for p, d in documents.items() if SGLANG in (d.get("serving") or {})}
    for path, document in documents.items():
        if path not in servable:
            serving = document.get("serving") or {}
            why = ("; ".join(serving.get("specsweep_only", []))
                   or serving.get("sglang_note", "no drafter SGLang serves"))
            say(f"{path.name}: SGLang not checked: this export has no SGLang flags ({why})")
    pairs = {p: refs(d["pair"]) for p, d in servable.items()}
    # held to the export's vLLM setting, drafted by its pair's kind's method in SGLang
    results = check([(pairs[p]["verifier"], d["serving"][SGLANG],
                      settings(pair_kind(d["pair"]).sglang_algorithm, pairs[p]["drafter"],
                               d["serving"][VLLM.section]["speculative_config"]["num_speculative_tokens"]))
                     for p, d in servable.items()]) if servable else []
    for (path, document), result in zip(servable.items(), results):
        if "error" in result:
            say(f"{path.name}: SGLang's parser: {result['error']}")
            continue
        document["serving"]["sglang_checked"] = result
        write_yaml(path, document)
        read = ", ".join(f"{k} {v}" for k, v in result["read"].items())
        say(f"{path.name}: {result['parser']} parser reads {read}")
    return all("error" not in r for r in results)
