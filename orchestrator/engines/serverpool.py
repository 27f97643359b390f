"""vLLM's measuring in a worker process: its pool of servers (`ServerPool`), and shards'
records and controls served on them (`serve_shards`, `Serving`).

A worker keeps, per pair, one vLLM server with the trial's speculative settings, and one server
without speculation, the control, per verifier and its settings (pairs over one verifier share
their control); a trial whose settings differ restarts the first (the start time goes into the
shard's result, so the run logs it). The speculative server starts resident at the
largest draft length its sweep asks (Shard.draft_ceiling) and drafts each trial's at run
time, so trials that differ only in their draft length share one start. A shard is served as
one load at the trial's concurrency (after an untimed load the first time a server serves that
load shape, its concurrency, request rate and draft length: load.warm), and the same prompts
as one load on the control server at the same concurrency (the honest-ratio rule of
specsweep's `ar` controls; under a request rate the control's requests arrive at the same
seeded times), each once the other server has stopped polling (load.switch). The trials the
queue hands over together (one server start, one control: Shard.together) share their
controls: with `serving.repeats` R, C A B C B A C ... (`balanced_order`: R passes over the
trials, R + 1 controls), each trial's median wall against the mean of the controls around
each pass. Each record is one request (its TTFT, TPOT, ITL gaps and latency); the shard is one
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

    def serve(self, server: VllmServer, prompts: list[list[int]], config: ServingConfig, counted: bool = True
              ) -> tuple:
        """A load on `server` (load.serve; `counted`: its requests' own counters read), once the
        server that served before is quiet; a resident server must have drafted the load's
        draft length (its plugin's report)."""
        self._turn_to(server)
        out = serve(server, prompts, config, counted)
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


def balanced_order(candidates: int, repeats: int) -> list[int | None]:
    """The timed loads of candidates 0..m-1 beside their shared control (None): a control, the
    candidates in order, a control, the candidates in reverse order, a control, ...
    (C 0 1 2 C 2 1 0 C for m = 3, R = 2): R passes and R + 1 controls, every candidate load
    between two controls, and two passes putting each candidate at the same mean position, so
    a drift linear in time weighs on every candidate alike."""
    order: list[int | None] = [None]
    for turn in range(repeats):
        order += [*(range(candidates) if turn % 2 == 0 else reversed(range(candidates))), None]
    return order


def neighbouring_control(control_walls: list[float]) -> float:
    """The control wall each candidate of a balanced order is compared with: the median over
    its passes p of (c_p + c_(p+1)) / 2, the mean of the two controls around pass p."""
    return statistics.median((a + b) / 2 for a, b in zip(control_walls, control_walls[1:]))


def serve_shards(pool: ServerPool, pair: str, configs: list[ServingConfig], control: ServingConfig | None,
                 prompts: list[list[int]], first: int, repeats: int = 1, ceiling: int | None = None
                 ) -> tuple[list[list[dict]], list[dict], float, list[dict]]:
    """(per config, one record per prompt; the control loads; seconds spent starting servers;
    per config, what its server ran it as: VllmServer.measured_as, a resident server's at that
    config's draft length). The configs share one
    server start, or are served by the control's (with a `ceiling` it is resident:
    ServerPool.server); every server is started
    and warmed before the first timed load. Without a control each config is served once; with
    one, the configs and the control are served in one balanced order (`balanced_order`, a config
    the control's own server serves next to the controls: each
    config `repeats` times, the control R + 1 times), each config's wall is the median of its
    loads and the control's the neighbouring one (`neighbouring_control`); the records, tokens
    and counters are each config's first load's."""
    started = 0.0

    def ready(config: ServingConfig):
        nonlocal started
        server, seconds = pool.server(pair, config, prompts, ceiling)
        started += seconds
        return server

    for config in [*configs, *([control] if control is not None else [])]:
        ready(config)
    firsts: dict[int, tuple] = {}  # config -> its first load and the counters it moved
    walls: dict[int | None, list[float]] = {j: [] for j in [*range(len(configs)), None]}
    new_tokens, at = 0, time.time()
    # a config its control's own server serves first in a pass, so its loads switch no server
    ranked = sorted(range(len(configs)), key=lambda j: configs[j] != control)
    passes = balanced_order(len(configs), repeats) if control is not None else list(range(len(configs)))
    order = [None if at is None else ranked[at] for at in passes]
    for j in order:
        config = control if j is None else configs[j]
        server = ready(config)  # sets a resident server's draft length; restarts one that died
        before = server.counters() if j is not None and j not in firsts else None
        served, wall = pool.serve(server, prompts, config, counted=before is not None)
        walls[j].append(wall)
        if before is not None:
            firsts[j] = (served, server.counters() - before, server.measured_as())
        if j is None and not new_tokens:
            new_tokens = sum(len(s.token_ids) for s in served)
    out = []
    for j, config in enumerate(configs):
        served, spent, _ = firsts[j]
        wall = statistics.median(walls[j])
        records = [{**s.record(), "batch": first, "batch_wall_s": wall} for s in served]
        if not config.one_at_a_time:
            for i, record in enumerate(records):
                own = i == 0  # the shard's counters on its first record, so they sum over the trial
                record.update(iterations=spent.iterations if own else 0, drafted=spent.drafted if own else 0,
                              accepted=spent.accepted if own else 0, shared_counters=True)
        out.append(records)
    controls = [] if control is None else [{"index": first, "new_tokens": new_tokens, "at": at,
                                            "wall_s": neighbouring_control(walls[None]), "repeats": repeats,
                                            "shared": len(configs)}]
    return out, controls, started, [firsts[j][2] for j in range(len(configs))]


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

    def measure(self, shards: list[Shard], items: list) -> list[dict]:
        """The shards (one, or several on one server start beside one control: Shard.together)
        served by `serve_shards`; the seconds spent starting servers and the starts go on the
        first shard's result, since they happened once."""
        worker, shard = self.worker, shards[0]
        if self.pool is None:
            self.pool = ServerPool(worker.pair_specs, None if worker.logs is None else Path(worker.logs))
        tokenizer = self.tokenizer(shard.pair)
        prompts = [tokenizer(prompt, verbose=False).input_ids for _, prompt in items]
        restarts, starts = self.pool.restarts, self.pool.starts
        served, controls, started, reports = serve_shards(self.pool, shard.pair, [s.config for s in shards],
                                                         shard.control, prompts, items[0][0].index,
                                                         shard.repeats, shard.draft_ceiling)
        out = []
        for n, records in enumerate(served):
            for (example, _), record in zip(items, records):
                record.update(judged(worker.task, example, record["text"]))
            once = n == 0
            out.append({"records": records, "controls": controls, "warmup": 0, **where(),
                        "engine_start_s": started if once else 0.0,
                        "engine_starts": self.pool.starts - starts if once else 0,
                        "engine_restarts": self.pool.restarts - restarts if once else 0,
                        "engine_report": reports[n]})
        return out

    def close(self) -> None:
        """Stop the vLLM servers this worker started."""
        if self.pool is not None:
            self.pool.close()
