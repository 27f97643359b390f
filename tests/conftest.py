import os

# No test may reach a hub: loading code must fail fast and clearly offline.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
