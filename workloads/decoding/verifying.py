"""One verification over every row of a batch: the verifier's forward over each row's [last,
draft] (`verify_forward`), then the acceptance rule on its logits (`accept`) and the rows
after each row's accepted drafts dropped from its cache (`verify_finish`). The parts are
separate because `packed` drafts between the forward and the rule, and self-speculative
schedules get the logits from a call of their own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from workloads.decoding.acceptance import verify_greedy_rows, verify_rows
from workloads.decoding.config import DecodeConfig
from workloads.decoding.layout import Layout
from workloads.decoding.network import Network
from workloads.decoding.rows import Rows
from workloads.decoding.sampling import distribution, point_mass


def accept(config: DecodeConfig, logits: torch.Tensor, q: torch.Tensor | None, drafted: torch.Tensor,
           lengths: torch.Tensor, draws: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """`config`'s acceptance rule over R rows: verifier logits (R, B + 1, V) over [last,
    draft], proposals q (R, B, V) (None: a point-mass drafter's, one-hot at each draft),
    drafted ids (R, B), row r's draft its first lengths[r]. At a point-mass lossless
    setting the greedy rule, drawing nothing (acceptance.verify_greedy_rows); else
    acceptance.verify_rows on the verifier's sampling distribution p, with (uniforms (R, B),
    noise like p) = draws(p). Returns (accepted (R,), token (R,))."""
    c = config
    if point_mass(c.temperature, c.top_k) and c.rule == "lossless":
        return verify_greedy_rows(logits, drafted, lengths)
    p = distribution(logits, c.temperature, c.top_k, c.top_p)
    if q is None:
        q = torch.nn.functional.one_hot(drafted, p.shape[-1]).float()
    uniforms, noise = draws(p)
    return verify_rows(c.rule, p, q, drafted, lengths, uniforms, noise, c.leniency)


def verify_forward(rows: Rows, verifier: Network, last: torch.Tensor, tokens: torch.Tensor,
                        widths: torch.Tensor) -> torch.Tensor:
    """The verifier over every live row's [last, its first widths[i] drafts of tokens (L, W)],
    appended to its cache (what each row keeps is recorded by verify_finish_rows); logits
    (L, W' + 1, V), W' the widest draft (near max_new_tokens every row drafts fewer)."""
    width = int(widths.max())
    layout = Layout.of(torch.zeros_like(widths), 1 + widths, False, True)
    ids = torch.cat([last.cpu()[:, None], tokens[:, :width]], 1)
    positions = verifier.slots.positions(np.arange(width + 1))
    return rows.call(verifier, layout.call(ids, positions, keep_later=True))


def verify_finish(rows: Rows, verifier: Network, logits: torch.Tensor, tokens: torch.Tensor,
                       q: torch.Tensor | None, widths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance rule on the logits (L, W' + 1, V) of a verifier call that left what
    each row keeps unrecorded (`verify_forward`, or a self-speculative call whose
    verify rows come first): each row keeps its last token and accepted drafts in the
    verifier's cache, and the counts are kept.
    Returns (accepted (L,), token (L,))."""
    width = logits.shape[1] - 1
    drafted, lengths = tokens[:, :width].to(logits.device), widths.to(logits.device)

    def draws(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rows.uniform(widths, width, p.device), rows.exponential(widths + 1, width + 1, p.shape[-1],
                                                                       p.device)

    q = None if q is None else q[:, :width].to(logits.device)
    accepted, token = accept(rows.config, logits, q, drafted, lengths, draws)
    accepted, token = accepted.cpu(), token.cpu()
    verifier.slots.keep_first((accepted + 1).numpy())
    rows.verified(widths, accepted)
    return accepted, token
