import os

# No test may reach a hub: loading code must fail fast and clearly offline.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
# vLLM servers started by tests keep their engine core in the API server's process: one Python
# import of vLLM fewer, so a start takes ~14 s instead of ~20 on 2 cores (tests assert no
# speed). Sweeps and exports keep vLLM's default; a test that kills the engine core's own
# process sets 1 (tests/orchestrator/sweep/test_serving.py).
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
