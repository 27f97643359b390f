"""The decoding benchmark's figures are the trial metrics a sweep logs: one formula each."""

from orchestrator.bench.decode import decode_all
from workloads.decoding import DecodeConfig
from workloads.models import load_pair
from workloads.tasks import get_task


def test_rows_use_the_sweeps_formulas_and_leave_undefined_figures_empty():
    prompts = [e.prompt for e in get_task("arith").examples("test", n=2, seed=3)]
    configs = {"ar": DecodeConfig(schedule="ar", max_new_tokens=16),
               "linear": DecodeConfig(block=4, steps=1, max_new_tokens=16)}
    totals = decode_all(load_pair("toy"), prompts, configs, warmup=0)
    ar = totals["ar"].throughput
    linear, baseline = totals["linear"].row(ar), totals["ar"].row(ar)
    assert linear["mean_accept_len"] == totals["linear"].sum("accepted") / totals["linear"].sum("iterations")
    assert linear["tokens_per_nfe"] == totals["linear"].metrics()["tokens_per_nfe"]
    assert baseline["acceptance_rate"] is None  # ar drafts nothing: no rate, not 0
