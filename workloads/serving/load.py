"""Load on a serving engine as `vllm bench serve` drives it: every prompt a streamed completion,
either all at once with `concurrency` requests in flight, or arriving at `request_rate` (gamma
inter-arrival times of shape `burstiness`, Poisson at 1) with at most `concurrency` in flight;
each timed at the client from its request to its first token (TTFT), between the chunks it
streams (ITL) and to its last (end-to-end latency)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import requests

from workloads.serving.config import ServingConfig, ServingError
from workloads.serving.counters import Counters
from workloads.serving.procs import wait_quiet
from workloads.serving.vllm import VllmServer, supervised

# A request's deadline: REQUEST_BASE_S, then SECONDS_PER_TOKEN for each token it asks for, for
# each request in flight beside it (a step serves them all). 10 tokens/s a slot is far below
# any engine that works (a toy pair on 2 CPU cores: ~500); a server that misses it is frozen.
REQUEST_BASE_S = 30.0
SECONDS_PER_TOKEN = float(os.environ.get("SPECSWEEP_VLLM_SECONDS_PER_TOKEN", "0.1"))


def request_deadline_s(max_new_tokens: int, concurrency: int) -> float:
    """Seconds a streamed request may take before its server counts as frozen:
    REQUEST_BASE_S + SECONDS_PER_TOKEN · max_new_tokens · concurrency."""
    return REQUEST_BASE_S + SECONDS_PER_TOKEN * max_new_tokens * concurrency


@dataclass(frozen=True)
class Served:
    """One request: the tokens it streamed back (stop and special tokens included), their
    text, its time to first token and end-to-end latency (from its arrival under a request
    rate), why it ended, the gaps between the chunks it streamed after the first (a chunk
    holds every token one step accepted), how long it waited for a slot, and, when requests
    went one at a time, its own spec-decode counters."""

    token_ids: list[int]
    text: str
    ttft_s: float
    wall_s: float
    finish_reason: str
    itl_s: list[float] = field(default_factory=list)
    queue_s: float = 0.0  # from its arrival to when it was sent (a load at a rate, bound reached)
    counters: Counters | None = None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (latency − TTFT) / (tokens − 1)."""
        n = len(self.token_ids)
        return (self.wall_s - self.ttft_s) / (n - 1) if n > 1 else None

    def record(self) -> dict:
        """Its measurements under the names of specsweep's records (docs/sweeps.md); the counters
        where the request had its own."""
        out = {"text": self.text, "token_ids": self.token_ids, "new_tokens": len(self.token_ids),
               "wall_s": self.wall_s, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "itl_s": self.itl_s,
               "queue_s": self.queue_s, "exact": True,
               "stop_reason": "length" if self.finish_reason == "length" else "stop"}
        if self.counters is not None:
            out.update(iterations=self.counters.iterations, drafted=self.counters.drafted,
                       accepted=self.counters.accepted)
        return out


def _stream(server: VllmServer, prompt: list[int], config: ServingConfig, arrived: float | None = None
            ) -> Served:
    """One streamed request; its TTFT and latency count from `arrived` (a perf_counter time:
    when it arrived, before it waited for a slot) where given, else from when it is sent."""
    body = {"model": server.settings.model, "prompt": prompt, "max_tokens": config.max_new_tokens,
            "temperature": config.temperature, "seed": config.seed, "stop": list(config.stop),
            "stream": True, "return_token_ids": True, "skip_special_tokens": False}
    tokens: list[int] = []
    text, finish, first, gaps = [], "length", None, []
    sent = last = time.perf_counter()
    began = sent if arrived is None else arrived
    limit = request_deadline_s(config.max_new_tokens, config.concurrency)
    try:
        # the read timeout bounds a silent server; the check after each event, a slow trickle
        with requests.post(f"{server.url}/v1/completions", json=body, stream=True,
                           timeout=(10, limit)) as response:
            if response.status_code != 200:
                if not server.alive():
                    raise server.lose(f"died (a request answered {response.status_code})")
                raise ServingError(f"engine: vllm refused a request ({response.status_code}): "
                                   f"{response.text[:200]}")
            for line in response.iter_lines():
                if time.perf_counter() - sent > limit:
                    raise server.lose(f"streamed for over {limit:.0f} s a request (frozen)")
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                for choice in _choices(server, line[6:]):
                    if choice.get("token_ids"):
                        now = time.perf_counter()
                        if first is None:
                            first = now - began
                        else:
                            gaps.append(now - last)
                        last = now
                    tokens += choice.get("token_ids") or []
                    text.append(choice.get("text") or "")
                    finish = choice.get("finish_reason") or finish
    except requests.RequestException as err:
        # a read that timed out mid-stream comes as a ConnectionError wrapping urllib3's timeout
        if isinstance(err, requests.Timeout) or "timed out" in str(err):
            raise server.lose(f"answered nothing for {limit:.0f} s (frozen)") from None
        raise server.lose(f"closed a request ({type(err).__name__})") from None
    wall = time.perf_counter() - began
    return Served(tokens, "".join(text), wall if first is None else first, wall, finish, gaps, sent - began)


def _choices(server: VllmServer, data: bytes) -> list[dict]:
    """A streamed event's choices. vLLM streams an error event (`{"error": ...}`) when its
    engine fails mid-request: the server is lost where it no longer answers its health check,
    else the request failed (ServingError either way, never a chunk)."""
    try:
        event = json.loads(data)
    except ValueError:
        raise server.lose(f"streamed what is not JSON: {data[:100]!r}") from None
    if isinstance(event, dict) and isinstance(event.get("choices"), list):
        return event["choices"]
    error = event.get("error", event) if isinstance(event, dict) else event
    message = error.get("message", error) if isinstance(error, dict) else error
    if not server.alive():
        raise server.lose(f"died under a load (it streamed: {str(message)[:200]})")
    raise ServingError(f"engine: vllm failed a request: {str(message)[:200]}")


def arrivals(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds from the load's start at which each of `count` requests is sent: the first at
    0, then gaps drawn from Gamma(shape = b, scale = 1 / (rate · b)), whose mean is 1 / rate
    and whose coefficient of variation is 1 / √b (b = 1: exponential gaps, a Poisson process)."""
    gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (rate * burstiness), size=max(count - 1, 0))
    return [0.0, *np.cumsum(gaps).tolist()][:count]


def _at_rate(server: VllmServer, prompts: list[list[int]], config: ServingConfig) -> list[Served]:
    """Each prompt queued at its arrival time (`arrivals`) for one of `concurrency` senders,
    so it waits while that many requests are in flight. A request's TTFT and latency count
    from its arrival, its wait for a slot included (`queue_s`), as a server's own queue
    would count it; `vllm bench serve --max-concurrency` starts the clock when it sends, which
    past saturation hides the wait and keeps TTFT flat however fast requests arrive."""
    times = arrivals(len(prompts), config.request_rate, config.burstiness, config.seed)
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        sent = []
        for prompt, at in zip(prompts, times, strict=True):
            time.sleep(max(0.0, began + at - time.perf_counter()))
            sent.append(pool.submit(_stream, server, prompt, config, began + at))
        return [request.result() for request in sent]


def serve(server: VllmServer, prompts: list[list[int]], config: ServingConfig, counted: bool = True
          ) -> tuple[list[Served], float]:
    """Each prompt (token ids) served, in order, with `config.concurrency` requests in flight
    (arriving at `config.request_rate` when it is set); and the wall time of the load. At
    concurrency 1 without a rate each request also carries its own spec-decode counters, read
    between requests (unless not `counted`: a repeat whose records are not kept), so the load's
    wall time is the sum of the requests' latencies (the reads are not load)."""
    if config.request_rate is not None:
        began = time.perf_counter()
        served = _at_rate(server, prompts, config)
        return served, time.perf_counter() - began
    if config.one_at_a_time:
        served = []
        for prompt in prompts:
            before = server.counters() if counted else None
            one = _stream(server, prompt, config)
            if before is not None:
                one = dataclasses.replace(one, counters=server.counters() - before)
            served.append(one)
        return served, sum(s.wall_s for s in served)
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        served = list(pool.map(lambda p: _stream(server, p, config), prompts))
    return served, time.perf_counter() - began


def records(served: list[Served], wall: float) -> list[dict]:
    """The requests of one load as records of one batch (`index` in prompt order, `batch` 0,
    the load's wall time as `batch_wall_s`), as the trial metrics read them."""
    return [{**s.record(), "index": i, "batch": 0, "batch_wall_s": wall} for i, s in enumerate(served)]


def switch(previous: VllmServer | None, server: VllmServer) -> None:
    """Before a timed load on `server`: wait until the server that served last is quiet
    (procs.wait_quiet: vLLM's busy polling after its last step)."""
    if previous is not None and previous is not server and previous.process is not None:
        wait_quiet(previous.process.pid)


def warm(server: VllmServer, prompts: list[list[int]], config: ServingConfig) -> None:
    """An untimed load the first time `server` serves `config`'s load shape (its concurrency,
    request rate and draft length: VllmServer.shape): the first batches of a shape pay one-time
    costs (allocation, kernel selection) no later load pays. All at once, the first prompt
    `max(2, concurrency)` times; at a rate, every prompt at that rate, since arrivals make
    batches of every size up to the bound (on CPU a first load at 128 requests/s read TTFT p99
    0.29 s, the next 0.07 s)."""
    shape = server.shape(config)
    if shape not in server.warmed:
        if config.request_rate is None:
            serve(server, [prompts[0]] * max(2, config.concurrency), config)
        else:
            serve(server, prompts, config)
        server.warmed.add(shape)


def measured(server: VllmServer, prompts: list[list[int]], config: ServingConfig
             ) -> tuple[list[Served], float]:
    """A timed load on `server` (`serve`) after an untimed one where it has not served this
    load shape (`warm`; a restarted server has served none), supervised: a server lost under
    it is started again and the load served once more (vllm.supervised)."""
    def load() -> tuple[list[Served], float]:
        warm(server, prompts, config)
        return serve(server, prompts, config)

    return supervised(server, load)
