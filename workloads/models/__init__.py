"""Model pairs: adapters, the bundled toy pair and its training."""

from workloads.models.families.selfspec import SelfPair
from workloads.models.families.twomodel import TwoModelPair
from workloads.models.pair import Pair, load_pair
from workloads.models.pairspec import PairError
from workloads.models.profiles import DiffusionProfile

__all__ = ["DiffusionProfile", "Pair", "PairError", "SelfPair", "TwoModelPair", "load_pair"]
