"""`specsweep decode`: decode prompts with one pair and one configuration."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestrator.errors import user_errors
from orchestrator.trust import TRUST, check_remote_code

OPT = dict(show_default=False)


def read_prompts(path: Path) -> list[str]:
    """A text file (one prompt a line) or JSON Lines with a `prompt` field."""
    if not path.is_file():
        raise ValueError(f"--prompts: no such file {path}")
    try:
        text = path.read_text()
    except UnicodeDecodeError as err:
        raise ValueError(f"--prompts: {path} is not UTF-8 text (byte {err.start})") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"--prompts: {path}:{number}: invalid JSON ({err.msg})") from None
            if "prompt" not in record:
                raise ValueError(f"--prompts: {path}:{number}: JSON line has no 'prompt' field")
            prompts.append(str(record["prompt"]))
        else:
            prompts.append(line)
    if not prompts:
        raise ValueError(f"--prompts: {path} holds no prompts")
    return prompts


@user_errors
def decode(
    pair: str = typer.Option(None, help="Pair name (toy, toy-self, toy-dflash); or from --config.", **OPT),
    prompt: str = typer.Option(None, help="Prompt text.", **OPT),
    prompts: Path = typer.Option(None, help="Text file (a prompt a line) or JSONL with 'prompt'.", **OPT),
    config: Path = typer.Option(None, help="Config YAML (settings, or an export); flags override.", **OPT),
    num_samples: int = typer.Option(1, min=1, help="Samples per prompt, seeds seed..seed+N-1."),
    batch_size: int = typer.Option(None, min=1, help="Decode N prompts together, in file order (default: "
                                   "the export's batch size, else 1).", **OPT),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per decode."),
    schedule: str = typer.Option(None, help="ar | diffusion | linear | packed | quadratic", **OPT),
    block: int = typer.Option(None, help="B: tokens drafted (dual-mode, DFlash: B-1 drafted).", **OPT),
    steps: int = typer.Option(None, help="K: denoising steps per block.", **OPT),
    threshold: float = typer.Option(None, help="τ: adaptive commit threshold (instead of K).", **OPT),
    unmask: str = typer.Option(None, help="ltr | confidence | margin | entropy | random", **OPT),
    rule: str = typer.Option(None, help="lossless | linear | cactus | match", **OPT),
    leniency: float = typer.Option(None, help="λ (linear, match) or δ (cactus).", **OPT),
    temperature: float = typer.Option(None, help="Verifier temperature (0 = greedy).", **OPT),
    top_k: int = typer.Option(None, **OPT),
    top_p: float = typer.Option(None, **OPT),
    draft_temperature: float = typer.Option(None, help="Drafter temperature (default: same).", **OPT),
    draft_top_k: int = typer.Option(None, **OPT),
    draft_top_p: float = typer.Option(None, **OPT),
    max_new_tokens: int = typer.Option(None, **OPT),
    seed: int = typer.Option(None, **OPT),
    stop: list[str] = typer.Option(None, help="Stop string (repeatable).", **OPT),
    verify_order: str = typer.Option(None, help="ltr | confidence (any-order packed, dual-mode).", **OPT),
    trust_remote_code: bool = TRUST,
) -> None:
    """Decode prompts with a pair under one configuration and print text and measurements."""
    from workloads.decoding import DecodeConfig

    flags = dict(schedule=schedule, block=block, steps=steps, threshold=threshold, unmask=unmask, rule=rule,
                 leniency=leniency, temperature=temperature, top_k=top_k, top_p=top_p,
                 draft_temperature=draft_temperature, draft_top_k=draft_top_k, draft_top_p=draft_top_p,
                 max_new_tokens=max_new_tokens, seed=seed, stop=tuple(stop) if stop else None,
                 verify_order=verify_order)
    document = read_config(config) if config is not None else {}
    pair = document.get("pair") if pair is None else pair
    if isinstance(pair, dict):
        check_remote_code({pair.get("name", "custom"): pair}, trust_remote_code, "config")
    if batch_size is None and isinstance(document.get("batch_size"), int) and document["batch_size"] >= 1:
        batch_size = document["batch_size"]  # an export decodes at the batch size it was measured at
    settings = DecodeConfig.from_dict(document.get("config", document)).to_dict()
    cfg = DecodeConfig.from_dict({**settings, **{k: v for k, v in flags.items() if v is not None}})
    if (prompt is None) == (prompts is None):
        raise ValueError("--prompt, --prompts: give exactly one")
    if pair is None:
        raise ValueError("--pair: required (or a config file with a 'pair' entry)")
    texts = [prompt] if prompt is not None else read_prompts(prompts)
    _decode_all(pair, texts, cfg, num_samples, batch_size or 1, as_json)


def read_config(path: Path) -> dict:
    """A config file's mapping (the settings, or an export with `config:`, `pair:` and
    `batch_size:`), read within the spec files' bounds."""
    from orchestrator.documents import read_document

    document = read_document(path, "config") or {}
    if not isinstance(document, dict):
        raise ValueError(f"config: {path} must hold a mapping of settings")
    if "config" not in document and "model" in document and ({"dtype", "speculative-config"} & set(document)):
        beside = path.with_name(path.name.removesuffix(".vllm.yaml").removesuffix(".yaml") + ".yaml")
        raise ValueError(f"config: {path} holds vLLM's options (for `vllm serve --config`); specsweep "
                         f"decodes the export beside it: specsweep decode --config {beside}")
    return document


def _decode_all(pair: str | dict, texts: list[str], cfg, num_samples: int, batch_size: int,
                as_json: bool) -> None:
    """Check, load, decode `texts` (`num_samples` seeds each) in batches and print them."""
    from workloads.decoding import decode_batch
    from workloads.decoding.engine import check_texts_fit
    from workloads.models import load_pair
    from workloads.models.families import pair_kind
    from workloads.models.pair import load_tokenizer
    from workloads.models.pairspec import max_positions

    pair_kind(pair).check(cfg)  # before any weights load (and print their progress bars)
    if (limit := max_positions(pair)) is not None:  # a local model: every prompt fits before any decodes
        check_texts_fit(load_tokenizer(pair), {f"prompt {i + 1}": t for i, t in enumerate(texts)},
                        cfg.max_new_tokens, limit)
    loaded = load_pair(pair)
    rows = [(text, cfg.seed + sample) for text in texts for sample in range(num_samples)]
    for index, start in enumerate(range(0, len(rows), batch_size)):
        batch = rows[start:start + batch_size]
        done = decode_batch(loaded, [text for text, _ in batch], cfg, seeds=[seed for _, seed in batch])
        for (text, seed), result in zip(batch, done.results):
            if as_json:
                typer.echo(json.dumps({"prompt": text, "seed": seed, **result.to_dict(), "batch_index": index,
                                       "batch_wall_s": done.wall_s}))
            else:
                typer.echo(f"{text}{result.text}")
                typer.echo(f"  [{result.new_tokens} tokens, {result.wall_s * 1000:.1f} ms, nfe {result.nfe}, "
                           f"accepted {result.accepted}/{result.drafted}, exact {result.exact}, "
                           f"stop {result.stop_reason}]")
        if not as_json and batch_size > 1:
            typer.echo(f"[batch {index}: {len(batch)} rows, {done.wall_s * 1000:.1f} ms, nfe {done.nfe}]")
