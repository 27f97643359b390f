"""Every load outside a sweep is supervised (vllm.supervised), on real processes (`make vllm`):
an engine core killed or frozen with requests in flight costs one restart and the load is
served again; lost twice, one line naming the log; a port taken before vLLM binds it is tried
again on another, and a server is identified before it is trusted."""

import http.server
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.needs_vllm import needs_vllm
from tests.workloads.serving.engines import DFLASH
from tests.workloads.serving.faults import KillOnce, engine_cores
from workloads.models.pairspec import BUNDLED
from workloads.serving import load
from workloads.serving.config import EngineFailure
from workloads.serving.load import serve
from workloads.serving.vllm import EngineSettings, VllmServer, supervised

pytestmark = needs_vllm

LONG = DFLASH.__class__(method="dflash", num_speculative_tokens=7, max_new_tokens=160, concurrency=4)


def _fault(server: VllmServer, sig: int, times: int, said: list[str]) -> threading.Thread:
    """Send `sig` to the engine core of whichever process `server` runs, `times` times, each once
    requests are in flight on it (a line of `said` per restart marks the next server)."""
    def run():
        for time_ in range(times):
            while len(said) < time_ or server.process is None or not server.alive():
                time.sleep(0.05)  # not while it starts: a frozen start is another case
            time.sleep(0.3)  # requests in flight
            for pid in engine_cores(server.process.pid):
                os.kill(pid, sig)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the fault tests (each leaves it lost or started again)."""
    server = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH), tmp_path_factory.mktemp("faults"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_a_killed_engine_core_costs_one_restart_and_the_load_is_served_again(server, arith):
    _, _, ids = arith
    reference, _ = serve(server, ids, LONG)
    said: list[str] = []
    _fault(server, signal.SIGKILL, 1, said)
    served, _ = supervised(server, lambda: serve(server, ids * 16, LONG), said.append)  # 128 requests
    restarts = server.restarts
    assert restarts == 1 and len(said) == 1
    assert said[0].startswith("engine: vllm server ") and "starting it again" in said[0]
    assert [s.token_ids for s in served[:len(ids)]] == [s.token_ids for s in reference]
    lost = said[0].split("(log: ")[1].split(")")[0]
    assert os.path.isfile(lost)  # the lost server's log is kept, under the folder asked for
    assert lost.startswith(str(server.dir.parent))


def test_a_server_found_dead_before_a_load_is_started_again_and_keeps_its_log(server, arith):
    """Its engine core killed between two loads: the next load finds it not serving, starts it
    again, and the dead server's log (which says why it died) stays, as a lost one's does."""
    if not server.alive():
        server.restart()
    _, _, ids = arith
    dead = server.log
    for pid in engine_cores(server.process.pid):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    said: list[str] = []
    restarts = server.restarts
    served, _ = supervised(server, lambda: serve(server, ids[:2], DFLASH), said.append)
    assert server.restarts == restarts + 1 and len(served) == 2
    assert len(said) == 1 and "is not serving; starting it again" in said[0]
    assert dead.is_file() and server.log != dead


def test_a_frozen_engine_is_lost_within_its_deadline_and_twice_is_one_line(server, arith, monkeypatch):
    """SIGSTOP of the engine core: /health still answers, no token comes; the request's deadline
    (here 5 s + 0.01 s a token a slot) ends it, the server is stopped and started again; frozen
    again, an EngineFailure in one line naming the second log."""
    restarts = server.restarts
    if not server.alive():  # the test before left it lost
        server.restart()
        restarts = server.restarts
    monkeypatch.setattr(load, "REQUEST_BASE_S", 5.0)
    monkeypatch.setattr(load, "SECONDS_PER_TOKEN", 0.01)
    _, _, ids = arith
    said: list[str] = []
    _fault(server, signal.SIGSTOP, 2, said)
    began = time.perf_counter()
    with pytest.raises(EngineFailure) as lost:
        supervised(server, lambda: serve(server, ids * 16, LONG), said.append)
    deadline = load.request_deadline_s(LONG.max_new_tokens, LONG.concurrency)  # 11.4 s
    assert time.perf_counter() - began < 2 * deadline + 120  # two deadlines and one start, not 600 s
    assert "answered nothing for 11 s (frozen)" in said[0]
    message = str(lost.value)
    assert "\n" not in message and message.endswith("again after one restart; see that log")
    assert server.restarts == restarts + 1 and not server.alive() and str(server.log) in message


def test_a_taken_port_is_tried_again_and_what_answers_there_is_not_trusted(tmp_path):
    """Another process answers /health on the port chosen for the server before vLLM binds it:
    vLLM cannot bind, and the server starts on a fresh port, identified by its own pid and model."""
    server = VllmServer(EngineSettings.of(BUNDLED["toy-dflash"], DFLASH), tmp_path / "logs")
    taken = server.port

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    fake = http.server.HTTPServer(("127.0.0.1", taken), Healthy)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        server.start()
        assert server.port != taken
        assert server.identity["model"] == BUNDLED["toy-dflash"]["verifier"]
        assert server.identity["pids"] and all(os.getpgid(p) == server.process.pid
                                               for p in server.identity["pids"])
    finally:
        fake.shutdown()
        server.stop()
    assert not os.listdir(tmp_path / "logs")  # a server stopped cleanly leaves no log folder


def test_conform_survives_its_engine_core_killed_with_one_restart(tmp_path):
    """`specsweep conform` with vLLM's engine core killed once its load is in flight: the check is
    served again on a restarted server and passes; the lost server's log stays under .specsweep/logs."""
    cli = "from orchestrator.cli import main; main()"
    conform = subprocess.Popen([sys.executable, "-c", cli, "conform", "--pair", "toy-dflash", "--limit", "8"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    fault = KillOnce(tmp_path / ".specsweep" / "logs", conform.pid)
    out, err = conform.communicate(timeout=600)
    assert fault.killed and conform.returncode == 0, err[-3000:]
    assert "PASS" in out and "starting it again and retrying the load once" in err
    assert list((tmp_path / ".specsweep" / "logs").glob("vllm-*/server.log"))  # the lost server's
