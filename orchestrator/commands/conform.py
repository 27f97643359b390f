"""`specsweep conform`: one configuration in specsweep's engine and in vLLM, prompt by prompt."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import typer

from orchestrator.errors import user_errors

OPT = dict(show_default=False)
LOGS = Path(".specsweep") / "logs"  # a server's log folder, kept where it failed


@user_errors
def conform(
    pair: str = typer.Option("toy-dflash", help="A pair whose drafter vLLM serves (a DFlash pair)."),
    method: str = typer.Option(None, help="vLLM's speculative method: the pair's drafter (default) or ngram "
                                          "(held to vLLM's n-gram drafting replayed over the verifier's "
                                          "greedy output)."),
    draft_tokens: int = typer.Option(7, min=1, help="vLLM's num_speculative_tokens (specsweep: the block "
                                     "that drafts as many, K = 1)."),
    task: str = typer.Option("arith", help="Task whose zero-shot prompts are decoded."),
    limit: int = typer.Option(32, min=1, help="Prompts from the task."),
    data: Path = typer.Option(None, help="The task's local data file, where it needs one.", **OPT),
    prompts: Path = typer.Option(None, help="Text file (a prompt a line) or JSONL instead of --task.", **OPT),
    max_new_tokens: int = typer.Option(48, min=1),
    dspark_draft_topk: int = typer.Option(None, help="DSpark: its Markov head picks among the base logits' "
                                          "top k (vLLM's dspark_draft_topk; specsweep's draft_top_k)."),
    workaround: bool = typer.Option(True, help="Let the vLLM plugin work around the kernel defect it finds "
                                    "(--no-workaround shows what stock vLLM does)."),
) -> None:
    """Check that vLLM decodes a configuration as specsweep's engine does: on every prompt the
    same greedy tokens and the same drafts, drafted and accepted tokens; a diff per prompt
    where not. Exit code 1 when they differ."""
    from orchestrator.commands.decode import read_prompts
    from workloads.models.pair import load_pair
    from workloads.models.pairspec import refs
    from workloads.serving.config import ServingConfig
    from workloads.serving.conformance import check, reference_method
    from workloads.serving.vllm import EngineSettings, VllmServer, vllm_python
    from workloads.tasks import get_task
    from workloads.tasks.prompts import format_prompt

    method = reference_method(pair, method, draft_tokens)
    vllm_python()  # set up, before the pair loads
    config = ServingConfig(method=method, num_speculative_tokens=draft_tokens, max_new_tokens=max_new_tokens,
                           dspark_draft_topk=dspark_draft_topk)
    if prompts is not None:
        texts = read_prompts(prompts)
    else:
        source = get_task(task, data)
        texts = [format_prompt(source, e) for e in source.examples("test", n=limit)]
    settings = dataclasses.replace(EngineSettings.of(refs(pair), config), workaround=workaround)
    server = VllmServer(settings, log_dir=LOGS.resolve())  # errors name the log wherever run from
    typer.echo(f"starting vLLM: {settings.model} with {settings.speculative}", err=True)
    loaded = load_pair(pair)
    try:
        started = server.start()
        typer.echo(f"vLLM serving after {started:.0f} s; {len(texts)} prompts in both engines", err=True)
        began = time.perf_counter()
        result = check(loaded, server, texts, config)
    finally:
        server.stop()
    typer.echo(f"{pair}, {len(texts)} prompts, {time.perf_counter() - began:.0f} s")
    for line in result.lines():
        typer.echo(line)
    if not result.passed:
        raise typer.Exit(1)
