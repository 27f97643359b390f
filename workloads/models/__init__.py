"""Model pairs: adapters, the bundled toy pair and its training."""

from workloads.models.pair import DiffusionProfile, Pair, PairError, SelfPair, TwoModelPair, load_pair

__all__ = ["DiffusionProfile", "Pair", "PairError", "SelfPair", "TwoModelPair", "load_pair"]
