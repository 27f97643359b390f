"""A network passes its KV cache under the name the model's forward takes: transformers
renamed `past_key_values` to `cache`, and a model given the other name drops the cache."""

import inspect

from dflash.model import DFlashDraftModel

from tests.workloads.decoding.conftest import tiny
from workloads.decoding.network import cache_keyword


def test_the_cache_goes_by_the_name_the_installed_transformers_takes():
    model = tiny(layers=1, seed=0)
    assert cache_keyword(model) in inspect.signature(model.forward).parameters


def test_a_model_that_still_takes_past_key_values_gets_it():
    assert cache_keyword(DFlashDraftModel) == "past_key_values"
