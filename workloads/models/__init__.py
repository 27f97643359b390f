"""Model pairs: adapters, the bundled toy pair and its training."""

from workloads.models.pair import DiffusionProfile, Pair, SelfPair, TwoModelPair, load_pair
from workloads.models.pairspec import PairError

__all__ = ["DiffusionProfile", "Pair", "PairError", "SelfPair", "TwoModelPair", "load_pair"]
