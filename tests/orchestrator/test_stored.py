"""The MLflow store a sweep writes: two sweeps opening one new sqlite store at once (their
processes creating and migrating its tables together) both get a working store."""

import subprocess
import sys

OPEN = """
import sys
from orchestrator.stored import store_client
store_client(sys.argv[1]).search_experiments()
"""


def test_two_processes_opening_one_new_sqlite_store_at_once_both_succeed(tmp_path):
    for attempt in range(2):  # unlocked, the two collided every time here (duplicate column name)
        uri = f"sqlite:///{tmp_path / f'mlflow{attempt}.db'}"
        runs = [subprocess.Popen([sys.executable, "-c", OPEN, uri], stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
        errors = [run.communicate(timeout=120)[1] for run in runs]
        assert [run.returncode for run in runs] == [0, 0], errors[0][-2000:] + errors[1][-2000:]
