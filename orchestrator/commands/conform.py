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
    resident: int = typer.Option(None, min=1, help="Serve from a server started at this "
                                 "num_speculative_tokens drafting --draft-tokens at run time, held also to a "
                                 "server started at --draft-tokens: same decoding, and a speed ratio whose "
                                 "interval contains 1.", **OPT),
    blocks: int = typer.Option(4, min=2, help="With --resident: timed blocks A B B A for the speed ratio."),
) -> None:
    """Check that vLLM decodes a configuration as specsweep's engine does: on every prompt the
    same greedy tokens and the same drafts, drafted and accepted tokens; a diff per prompt
    where not. Exit code 1 when they differ."""
    from orchestrator.commands.decode import read_prompts
    from workloads.models.pair import load_pair
    from workloads.models.pairspec import refs
    from workloads.serving import resident as residency
    from workloads.serving.config import ServingConfig, ServingError
    from workloads.serving.conformance import reference_method, run
    from workloads.serving.venv import vllm_python
    from workloads.serving.vllm import EngineSettings
    from workloads.tasks import get_task
    from workloads.tasks.prompts import format_prompt

    method = reference_method(pair, method, draft_tokens)
    if resident is not None and resident < draft_tokens:
        raise ServingError(f"--resident: {resident} is below --draft-tokens {draft_tokens}; a resident "
                           "server drafts at most the num_speculative_tokens it started with")
    vllm_python()  # set up, before the pair loads
    config = ServingConfig(method=method, num_speculative_tokens=draft_tokens, max_new_tokens=max_new_tokens,
                           dspark_draft_topk=dspark_draft_topk)
    if prompts is not None:
        texts = read_prompts(prompts)
    else:
        source = get_task(task, data)
        texts = [format_prompt(source, e) for e in source.examples("test", n=limit)]
    settings = dataclasses.replace(EngineSettings.of(refs(pair), config), workaround=workaround)
    loaded = load_pair(pair)
    began = time.perf_counter()
    say = lambda said: typer.echo(said, err=True)  # noqa: E731
    if resident is not None:
        result = residency.check(loaded, texts, config, settings, resident, blocks, LOGS.resolve(), say)
    else:  # errors name the log folder wherever it is run from
        result = run(loaded, texts, config, settings, LOGS.resolve(), say)
    typer.echo(f"{pair}, {len(texts)} prompts, {time.perf_counter() - began:.0f} s")
    typer.echo("\n".join(result.lines()))
    if not result.passed:
        raise typer.Exit(1)
