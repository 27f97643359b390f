"""Data plane of specsweep: models, decoding and tasks.

Importable without Ray, Optuna or MLflow; nothing here imports `orchestrator`.
"""
