"""`export --check-schedule R`: by_batch_size.yaml's drafts schedule served as one vLLM server
and measured at both sides of each switch (analysis/schedule.py states the rule), and the cost
of running speculation at the schedule's smallest n against a server without it.

At a side c of a switch the schedule's server and a server of the n it does not draft at c
serve the trial's prompts at concurrency c (all at once), R times each, in the order A B B A
...; a switch where the schedule's load was slower in every pair at one side is refused: it
moves by one batch size, so the n that beat the schedule there drafts there. Then, where the
schedule drafts its smallest n, its server against vLLM without speculation, R pairs:
`smallest_n`. Everything goes into the file under `vllm.schedule_check`; the
`speculative_config` written is the schedule with its refused switches moved.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from orchestrator.analysis.schedule import always_slower, moved, refusal_error, switches
from orchestrator.engines import VLLM
from workloads.serving.config import RUNTIME_DRAFT, ServingConfig
from workloads.serving.load import measured, switch, warm
from workloads.serving.vllm import EngineSettings, VllmServer, supervised


def _server(verifier: str, speculative: dict | None, logs: Path | None, resident: bool = False) -> VllmServer:
    server = VllmServer(EngineSettings(verifier, None if speculative is None else json.dumps(speculative)),
                        logs, resident)
    server.start()
    return server


def interleaved(ours: VllmServer, theirs: VllmServer, prompts: list[list[int]], config: ServingConfig,
                repeats: int) -> tuple[list[float], list[float]]:
    """Both servers' load walls at `config`'s concurrency, `repeats` each, A B B A ... (after
    an untimed load on each): (ours, theirs), pair i the i-th of each."""
    walls: dict[str, list[float]] = {"ours": [], "theirs": []}
    last = None
    for server in (ours, theirs):
        switch(last, server)
        supervised(server, lambda s=server: warm(s, prompts, config))
        last = server
    for turn in range(2 * repeats):
        side = ("ours", "theirs")[(turn + turn // 2) % 2]  # A B B A A B ...
        server = ours if side == "ours" else theirs
        switch(last, server)
        last = server
        walls[side].append(measured(server, prompts, config)[1])
    return walls["ours"], walls["theirs"]


def check_schedule(verifier: str, speculative: dict, prompts: list[list[int]], max_new_tokens: int,
                   repeats: int, say: Callable[[str], None], logs: Path | None = None
                   ) -> tuple[dict | None, dict]:
    """(the schedule with its refused switches moved, None where it no longer speculates;
    what was measured). A side above the number of prompts is skipped: its loads could not
    hold that many requests in flight."""
    ranges = speculative["num_speculative_tokens_per_batch_size"]
    base = {k: v for k, v in speculative.items() if k != "num_speculative_tokens_per_batch_size"}
    load = ServingConfig(method=speculative["method"], max_new_tokens=max_new_tokens,
                         num_speculative_tokens=speculative["num_speculative_tokens"])
    found: dict = {"repeats": repeats, "refusal_error": refusal_error(repeats), "switches": []}
    kept = [list(r) for r in ranges]
    servers = Singles(verifier, base, max(n for _, _, n in ranges), logs)
    schedule = _server(verifier, speculative, logs)
    try:
        for point in switches(ranges):
            entry = {"below": point.below, "above": point.above, "n_below": point.n_below,
                     "n_above": point.n_above, "sides": []}
            for concurrency, other in ((point.below, point.n_above), (point.above, point.n_below)):
                if concurrency > len(prompts):
                    entry["sides"].append({"concurrency": concurrency, "skipped": f"above the {len(prompts)} "
                                           "prompts: a load cannot hold that many in flight"})
                    continue
                ours, theirs = interleaved(schedule, servers.of(other), prompts,
                                           replace(load, concurrency=concurrency), repeats)
                slower = always_slower(ours, theirs)
                entry["sides"].append({"concurrency": concurrency, "other_n": other, "schedule_wall_s": ours,
                                       "other_wall_s": theirs, "schedule_always_slower": slower})
                say(f"  switch {point.n_below}->{point.n_above} at {point.below}|{point.above}, concurrency "
                    f"{concurrency}: schedule {statistics.median(ours):.3f} s, n={other} "
                    f"{statistics.median(theirs):.3f} s" + (" (schedule slower in every pair)" * slower))
            lost = [s["concurrency"] for s in entry["sides"] if s.get("schedule_always_slower")]
            entry["refused"] = len(lost) == 1  # lost at both sides: no side to move it towards
            if entry["refused"]:
                kept = moved(kept, point, lost[0])
            found["switches"].append(entry)
        found["smallest_n"] = _smallest(schedule, servers.of(0), ranges, prompts, load, repeats, say)
    finally:
        schedule.stop()
        servers.stop()
    drafts = [n for _, _, n in kept]
    written = {**base, "num_speculative_tokens": max(drafts)}
    if len(set(drafts)) > 1:
        written["num_speculative_tokens_per_batch_size"] = kept
    return (written if max(drafts) else None), found


class Singles:
    """A server drafting one n at a time (0: no speculation) over the schedule's verifier and
    drafter: every n > 0 on one resident server started at the schedule's largest n
    (`ceiling`), drafting n at run time (a method outside RUNTIME_DRAFT: a server per n); each
    server started the first time it is asked for."""

    def __init__(self, verifier: str, base: dict, ceiling: int, logs: Path | None):
        self.verifier, self.base, self.ceiling, self.logs, self.servers = verifier, base, ceiling, logs, {}
        self.resident = base["method"] in RUNTIME_DRAFT

    def of(self, n: int) -> VllmServer:
        key = min(n, 1) if self.resident else n  # 0: the control
        if key not in self.servers:
            drafts = self.ceiling if self.resident else n
            drafting = {**self.base, "num_speculative_tokens": drafts} if n else None
            resident = bool(n) and self.resident
            self.servers[key] = _server(self.verifier, drafting, self.logs, resident)
        if n and self.resident:
            self.servers[key].draft(n)
        return self.servers[key]

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


def _smallest(schedule: VllmServer, plain: VllmServer, ranges: list[list[int]], prompts: list[list[int]],
              load: ServingConfig, repeats: int, say: Callable[[str], None]) -> dict:
    """The schedule where it drafts its smallest n (the largest concurrency of that n's last
    range, at most the number of prompts) against no speculation: the cost of having
    speculation on there (vLLM issue 49548's case when that n is 0)."""
    _, hi, n = min(reversed(ranges), key=lambda r: r[2])
    concurrency = min(hi, len(prompts))
    ours, theirs = interleaved(schedule, plain, prompts, replace(load, concurrency=concurrency), repeats)
    ratio = statistics.median(theirs) / statistics.median(ours)
    say(f"  speculation on at n={n} (concurrency {concurrency}): {ratio:.2f}x the speed of vLLM without it")
    return {"concurrency": concurrency, "n": n, "schedule_wall_s": ours, "none_wall_s": theirs,
            "throughput_ratio": ratio}


def check_exported_schedule(out: Path, uri: str, repeats: int, say: Callable[[str], None],
                            logs: Path | None = None) -> None:
    """Check by_batch_size.yaml's schedule in `out` (where it has one) on its first trial's
    prompts; write the merged schedule and the measurements back into the file."""
    from orchestrator.analysis.verify import prompt_ids, read_export
    from orchestrator.files import write_yaml
    from orchestrator.stored import logged_records, store_client
    from workloads.models.pairspec import refs

    path = out / "by_batch_size.yaml"
    table = read_export(path)
    if VLLM.section not in table:
        say("by_batch_size.yaml: no drafts schedule to check (one n for every batch size, or no vLLM "
            "setting)")
        return
    first = next(iter(table["by_batch_size"].values()))
    records = logged_records(store_client(uri), first["provenance"]["mlflow_run_id"]) or []
    prompts = prompt_ids(first["pair"], [r["prompt"] for r in records])
    say(f"by_batch_size.yaml: checking its drafts schedule at each switch, {repeats} loads a side "
        f"(a switch as fast as the other n is refused with chance <= {refusal_error(repeats):.3g})")
    speculative = table[VLLM.section]["speculative_config"]
    written, found = check_schedule(refs(first["pair"])["verifier"], speculative, prompts,
                                    first["config"]["max_new_tokens"], repeats, say, logs)
    refused = [f"{s['n_below']}->{s['n_above']} at {s['below']}|{s['above']}" for s in found["switches"]
               if s["refused"]]
    table[VLLM.section] = {"speculative_config": written, "schedule_check": found}
    write_yaml(path, table)
    now = written.get("num_speculative_tokens_per_batch_size", written) if written else "no speculation"
    say("by_batch_size.yaml: " + (f"refused {', '.join(refused)}; the schedule written moves them: {now}"
                                  if refused else "every switch kept"))
