"""vLLM's measuring in a worker process: its pool of servers (`ServerPool`), and a shard's
records and controls served on them (`serve_shard`, `Serving`).

A worker keeps, per pair, one vLLM server with the trial's speculative settings, and one server
without speculation, the control, per verifier and its settings (pairs over one verifier share
their control); a trial whose settings differ restarts the first (the start time goes into the
shard's result, so the run logs it). The speculative server starts resident at the
largest draft length its sweep asks (Shard.draft_ceiling) and drafts each trial's at run
time, so trials that differ only in their draft length share one start. A shard is served as
one load at the trial's concurrency (after an untimed load the first time a server serves that
load shape, its concurrency, request rate and draft length: load.warm), then the same prompts
as one load on the control server at the same concurrency, timed back to back with it (the
honest-ratio rule of specsweep's `ar` controls; under a request rate the control's requests arrive at the same
seeded times), each once the other server has stopped polling (load.switch); with
`serving.repeats` R, each side R times in the order A B B A A B ..., each side's median wall
kept. Each record is one request (its TTFT, TPOT, ITL gaps and latency); the shard is one
batch, whose wall time is the load's. Requests sent one after another (concurrency 1, no rate)
have their own spec-decode counters; otherwise the shard's counters go on its first record, so
they sum over a trial as specsweep's do."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from pathlib import Path

from orchestrator.engines.shard import Shard, judged, where
from workloads.models.pairspec import refs
from workloads.serving.config import RUNTIME_DRAFT, EngineFailure, ServingConfig, ServingError
from workloads.serving.load import serve, switch, warm
from workloads.serving.vllm import EngineSettings, VllmServer

log = logging.getLogger(__name__)
START_TRIES = 2  # failed starts in a row after which a worker no longer starts those settings


class ServerPool:
    """The vLLM servers of one worker, a speculative one by its pair and a control by its settings
    (the verifier's; shared by the pairs over it), supervised: a server is
    health-checked before each load it serves and started again when it has died (`restarts`
    counts them); a server that cannot start is not kept, and the reason it gave is what the
    shard raises. Settings that failed START_TRIES starts in a row are not started again: their
    last reason is raised at once (a second try lets a start cut short by a fault, an engine
    core killed while it loaded, pass on the shard's retry)."""

    def __init__(self, pair_specs: dict[str, str | dict], logs: Path | None = None):
        self.pair_specs = pair_specs
        self.logs = logs  # the servers' log folders (the system's temporary directory without)
        self.servers: dict[str | EngineSettings, VllmServer] = {}  # pair / a control's settings -> server
        # settings -> why they last failed to start, and how many starts in a row failed
        self.failed: dict[EngineSettings, tuple[ServingError | EngineFailure, int]] = {}
        self.restarts = 0  # servers found dead and started again
        self.starts = 0  # servers started, restarts included
        self.last: VllmServer | None = None  # the server that served last

    def _turn_to(self, server: VllmServer) -> None:
        switch(self.last, server)
        self.last = server

    def serve(self, server: VllmServer, prompts: list[list[int]], config: ServingConfig) -> tuple:
        """A load on `server` (load.serve), once the server that served before is quiet; a
        resident server must have drafted the load's draft length (its plugin's report)."""
        self._turn_to(server)
        out = serve(server, prompts, config)
        if server.resident and (drafted := server.drafted()) != server.draft_tokens:
            raise EngineFailure(f"engine: the vLLM server on port {server.port} drafted {drafted} "
                                f"tokens a step, not the {server.draft_tokens} asked at run time "
                                f"(log: {server.log})")
        return out

    def _start(self, settings: EngineSettings, resident: bool) -> VllmServer:
        err, tries = self.failed.get(settings, (None, 0))
        if err is not None and tries >= START_TRIES:
            raise err
        server = VllmServer(settings, self.logs, resident)
        try:
            server.start()
        except (ServingError, EngineFailure) as failed:
            server.stop()
            self.failed[settings] = (failed, tries + 1)
            raise
        self.failed.pop(settings, None)
        return server

    def server(self, pair: str, config: ServingConfig, warm_up: list[list[int]], ceiling: int | None = None
               ) -> tuple[VllmServer, float]:
        """The running server for `config` on `pair`, drafting its draft length and warmed for
        its load shape on `warm_up` (load.warm), and the seconds spent starting it now (0 when
        it was already running with these settings and answers its health check). With a
        `ceiling` a speculative server starts resident at that draft length and drafts each
        config's at run time: configs that differ only in their draft length share it."""
        resident = (ceiling is not None and config.method in RUNTIME_DRAFT
                    and config.num_speculative_tokens <= ceiling)
        started_at = dataclasses.replace(config, num_speculative_tokens=ceiling) if resident else config
        settings = EngineSettings.of(refs(self.pair_specs[pair]), started_at)
        speculative = settings.speculative is not None
        slot = pair if speculative else settings
        server = self.servers.get(slot)
        if server is not None:
            same = server.settings == settings
            alive = same and server.alive()  # one health check a call
            if same and not alive:
                log.warning("vLLM server %s (%s) died; starting it again (log: %s)", server.url,
                            "speculative" if speculative else "control", server.log)
                self.restarts += 1
            if not alive:
                server.stop()
                del self.servers[slot]
                server = None
        started = 0.0
        if server is None:
            server = self._start(settings, resident)
            self.servers[slot] = server
            self.starts += 1
            started = server.start_s
        if resident:
            server.draft(config.num_speculative_tokens)
        if server.shape(config) not in server.warmed:
            self._turn_to(server)
            warm(server, warm_up, config)
        return server, started

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()


def serve_shard(pool: ServerPool, pair: str, config: ServingConfig, control: ServingConfig | None,
                prompts: list[list[int]], first: int, repeats: int = 1, ceiling: int | None = None
                ) -> tuple[list[dict], list[dict], float, dict]:
    """(one record per prompt, the control load, seconds spent starting servers, what the
    vLLM plugin found and worked around in the trial's server). With a `ceiling` the trial's
    server is resident (ServerPool.server). With a control, the trial's
    load and the control's are each served `repeats` times, A B B A A B ..., and each side's
    wall is its median; the records, tokens and counters are the first load's."""
    server, started = pool.server(pair, config, prompts, ceiling)
    before = server.counters()
    served, wall = pool.serve(server, prompts, config)
    spent = server.counters() - before
    records = [{**s.record(), "batch": first, "batch_wall_s": wall} for s in served]
    if not config.one_at_a_time:
        for i, record in enumerate(records):
            own = i == 0  # the shard's counters on its first record, so they sum over the trial
            record.update(iterations=spent.iterations if own else 0, drafted=spent.drafted if own else 0,
                          accepted=spent.accepted if own else 0, shared_counters=True)
    if control is None:
        return records, [], started, server.measured_as()
    plain, plain_started = pool.server(pair, control, prompts)
    started += plain_started
    at = time.time()
    # by side, not by server: a trial without speculation is served by the control's server
    trial_walls, control_walls = [wall], []
    for turn in range(2 * repeats - 1):  # after A: B, then B A, A B, ... (drift falls on both)
        on_control = turn % 4 in (0, 1)
        load, load_wall = pool.serve(plain if on_control else server, prompts,
                                        control if on_control else config)
        (control_walls if on_control else trial_walls).append(load_wall)
        if on_control and len(control_walls) == 1:
            new_tokens = sum(len(s.token_ids) for s in load)
    for record in records:
        record["batch_wall_s"] = statistics.median(trial_walls)
    controls = [{"index": first, "new_tokens": new_tokens, "wall_s": statistics.median(control_walls),
                 "at": at, "repeats": repeats}]
    return records, controls, started, server.measured_as()


class Serving:
    """The vllm engine's measurer (engine.Measurer): a worker's shards served on its
    `ServerPool`, started on its first shard; `engine_start_s`: seconds spent starting servers
    for a shard; `engine_restarts`: servers found dead and started again."""

    def __init__(self, worker):
        self.worker = worker
        self.pool: ServerPool | None = None
        self.tokenizers: dict = {}  # pair -> its tokenizer, loaded on the pair's first shard

    def tokenizer(self, pair: str):
        from workloads.models.pair import load_tokenizer

        if pair not in self.tokenizers:
            self.tokenizers[pair] = load_tokenizer(self.worker.pair_specs[pair])
        return self.tokenizers[pair]

    def measure(self, shard: Shard, items: list) -> dict:
        worker = self.worker
        if self.pool is None:
            self.pool = ServerPool(worker.pair_specs, None if worker.logs is None else Path(worker.logs))
        tokenizer = self.tokenizer(shard.pair)
        prompts = [tokenizer(prompt, verbose=False).input_ids for _, prompt in items]
        restarts, starts = self.pool.restarts, self.pool.starts
        records, controls, started, report = serve_shard(self.pool, shard.pair, shard.config, shard.control,
                                                         prompts, items[0][0].index, shard.repeats,
                                                         shard.draft_ceiling)
        for (example, _), record in zip(items, records):
            record.update(judged(worker.task, example, record["text"]))
        return {"records": records, "controls": controls, "warmup": 0, **where(), "engine_start_s": started,
                "engine_starts": self.pool.starts - starts, "engine_restarts": self.pool.restarts - restarts,
                "engine_report": report}

    def close(self) -> None:
        """Stop the vLLM servers this worker started."""
        if self.pool is not None:
            self.pool.close()
