"""`specsweep bench batch` on a few prompts: one row per batch size, ratios from its own figures,
and HF generate's batched greedy output as long as `ar`'s; with vLLM, its columns from the
same prompts."""

from orchestrator.bench.batch import batch_comparison, hf_generate, table, vllm_columns
from tests.needs_vllm import on_vllm
from workloads.decoding import DecodeConfig, decode_batch
from workloads.models import load_pair
from workloads.models.pairspec import BUNDLED
from workloads.tasks import get_task


def test_one_row_per_batch_size_with_its_own_ratio():
    pair = load_pair("toy")
    prompts = [e.prompt for e in get_task("arith").examples("test", n=4)]
    rows = batch_comparison(pair, prompts, [1, 2], max_new_tokens=8)
    assert [r["batch_size"] for r in rows] == [1, 2]
    for r in rows:
        assert r["ratio"] == r["best_tps"] / r["ar_tps"] and r["best"] in r["tps"]
        assert set(r["slack_tps"]) == {"0", "0.5", "1"} and min(r["slack_tps"].values()) > 0
        assert r["ar_host_ms"] > 0 and r["best_host_ms"] > 0  # wall beyond model time, per iteration
    ar = decode_batch(pair, prompts, DecodeConfig(schedule="ar", max_new_tokens=8)).results
    assert hf_generate(pair, prompts, 8)[0] == sum(r.new_tokens for r in ar)


@on_vllm
def test_vllm_columns_serve_the_same_prompts_at_each_batch_size():
    pair = load_pair("toy-dflash")
    prompts = [e.prompt for e in get_task("arith").examples("test", n=4)]
    columns = vllm_columns(pair, BUNDLED["toy-dflash"], prompts, [2], max_new_tokens=8, blocks=(4,))
    assert set(columns) == {2} and columns[2]["vllm_dflash_n"] == 3
    assert columns[2]["vllm_ar_tps"] > 0 and columns[2]["vllm_dflash_tps"] > 0
    rows = [{**r, **columns[2]} for r in batch_comparison(pair, prompts, [2], max_new_tokens=8)]
    lines = table(rows, "toy-dflash", 4, 1)
    assert "vllm dflash" in lines[1] and f"n={columns[2]['vllm_dflash_n']} " in lines[2]
