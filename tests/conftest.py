import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter

import pytest
import torch

# No test may reach a hub: loading code must fail fast and clearly offline.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
# vLLM servers started by tests run the model in their engine core's process, not in a worker
# process of its own: one Python import of vLLM fewer, so a start takes ~14.6 s instead of ~21
# here (tests assert no speed). The engine core stays a process of its own (the API server
# starts `VLLM::EngineCore`), so the fault tests kill it as they would a default server's.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# ... and fork that engine core from the API server instead of spawning a fresh interpreter (the
# plugin's forked_engine: one vLLM import fewer again, 10.8 s a start instead of 19.5 here); the
# plugin takes it only with one OpenMP thread (set below under pytest-xdist, as `make test` runs).
os.environ.setdefault("SPECSWEEP_VLLM_FORK_ENGINE", "1")
# ... and fork every server a test process starts from one process that imported vLLM once (the
# launcher: workloads.serving.starts), instead of importing vLLM again at each of its ~13 starts.
# test_guard.py also starts servers the default way.
os.environ.setdefault("SPECSWEEP_VLLM_LAUNCHER", "1")
# Under pytest-xdist (`make test` runs three test processes on two cores) each test process, and
# every process it starts, computes on one thread: two processes each spinning two OpenMP
# threads on two cores took the fast tier from 2.0 to 6.3 minutes here.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# A Ray head of its own, started by a driver that holds it (ray.init in a helper process, not
# `ray start`, which would record itself as this machine's cluster for every later ray.init and
# `--ray-address auto`); it ends when the helper's stdin closes.
RAY_HEAD = """
import os, sys, ray
ray.init(num_cpus=int(sys.argv[1]), resources={"gpu_slot": int(sys.argv[2])}, include_dashboard=False,
         _temp_dir=sys.argv[3], log_to_driver=False, configure_logging=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


class RayHead:
    """The tests' local Ray head, in a helper process, sized for `processes` test processes:
    three CPUs and two of the tests' simulated GPU slots (`gpu_slot`) for each (two worker
    slots and the driver's tasks, as the largest local head a test sweep asks for has)."""

    def __init__(self, processes: int, env: dict[str, str]):
        self.temp = f"/tmp/specsweep-ray-tests-{os.getpid()}"
        cpus, slots = str(3 * processes), str(2 * processes)
        self.helper = subprocess.Popen([sys.executable, "-c", RAY_HEAD, cpus, slots, self.temp],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       start_new_session=True,
                                       env={"RAY_AUTH_MODE": "disabled", **env})  # as raycluster.start
        self._address = None

    def address(self) -> str:
        if self._address is None:
            self._address = self.helper.stdout.readline().strip()
            assert self._address, f"the tests' Ray head did not start (exit {self.helper.poll()})"
        return self._address

    def stop(self) -> None:
        self.helper.stdin.close()
        try:
            self.helper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.helper.kill()
            self.helper.wait()
        with contextlib.suppress(ProcessLookupError):  # whatever of the head outlived its driver
            os.killpg(self.helper.pid, signal.SIGKILL)
        shutil.rmtree(self.temp, ignore_errors=True)


SHARED_HEAD = pytest.StashKey[RayHead]()


def pytest_configure(config):
    """Under pytest-xdist, one Ray head for all the test processes, started by the process
    that runs them: two or three heads fewer to start, and to keep polling through the run
    (about 20 CPU-seconds a head on 2 cores), each process given what a head of its own had;
    its workers compute on one thread, as theirs did."""
    processes = len(config.getoption("tx", None) or [])  # pytest-xdist's, one a test process
    if processes and config.getoption("dist", "no") != "no" and not hasattr(config, "workerinput"):
        config.stash[SHARED_HEAD] = RayHead(processes, {**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, before it starts a test process: the shared head's address for it."""
    if (head := node.config.stash.get(SHARED_HEAD, None)) is not None:
        node.workerinput["specsweep_ray_head"] = head.address()


def pytest_unconfigure(config):
    if (head := config.stash.get(SHARED_HEAD, None)) is not None:
        head.stop()


@pytest.fixture(scope="session")
def ray_head(request):
    """The address of the local Ray head the sweeps join with --ray-address (or Driver's
    ray_address) instead of each starting and stopping a head of its own (4 to 10 s a sweep on
    2 cores): the one all test processes share under pytest-xdist, else one for this process
    (`RayHead`), stopped at the end. Heads of
    their own: the tests of the local head itself (test_raycluster.py), the demo's path as one
    CLI sweep, SIGTERM to a sweep process, and the two-node cluster's local twin."""
    shared = getattr(request.config, "workerinput", {}).get("specsweep_ray_head")
    if shared:
        yield shared
        return
    head = RayHead(1, dict(os.environ))
    try:
        yield head.address()
    finally:
        head.stop()


def pytest_collection_modifyitems(items):
    """Test files costliest first, each file's tests in their own order: by their weight, a
    test starting vLLM servers counting 5 and another slow (real-process) test 1 or what its
    mark says (`slow(5)`: Ray heads of its own and Ray's own waits, as long as a vLLM test),
    then by their number of tests. The test processes take files in this order (`make test` passes
    --no-loadscope-reorder: pytest-xdist would order them by number of tests alone, which put
    the few-test vLLM files last): a long file taken last holds the run up while the other
    processes have nothing left to take."""
    weight, tests = Counter(), Counter()
    for item in items:
        tests[item.path] += 1
        slow = item.get_closest_marker("slow")
        weight[item.path] += 5 if item.get_closest_marker("vllm") else (slow.args or [1])[0] if slow else 0
    items.sort(key=lambda item: (-weight[item.path], -tests[item.path], str(item.path)))
