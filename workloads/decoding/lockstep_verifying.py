"""One verification over every row of a batch at once (verifying.py in lockstep): the
verifier's forward over each row's [last, draft], then its acceptance rule
(acceptance.verify_rows) and the crop of the rows after each row's accepted drafts."""

from __future__ import annotations

import numpy as np
import torch

from workloads.decoding.calls import Network
from workloads.decoding.lockstep import Layout, Rows
from workloads.decoding.verifying import accept


def verify_forward_rows(rows: Rows, verifier: Network, last: torch.Tensor, tokens: torch.Tensor,
                        widths: torch.Tensor) -> torch.Tensor:
    """The verifier over every live row's [last, its first widths[i] drafts of tokens (L, W)],
    appended to its cache (what each row keeps is recorded by verify_finish_rows); logits
    (L, W' + 1, V), W' the widest draft (near max_new_tokens every row drafts fewer)."""
    width = int(widths.max())
    layout = Layout.of(torch.zeros_like(widths), 1 + widths, False, True)
    ids = torch.cat([last.cpu()[:, None], tokens[:, :width]], 1)
    positions = verifier.slots.positions(np.arange(width + 1))
    return rows.call(verifier, ids, positions, layout.among, None, layout.real)


def verify_finish_rows(rows: Rows, verifier: Network, logits: torch.Tensor, tokens: torch.Tensor,
                       q: torch.Tensor | None, widths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance rule on the logits (L, W' + 1, V) of a verifier call that left what
    each row keeps unrecorded (`verify_forward_rows`, or a self-speculative call whose
    verify rows come first): each row keeps its last token and accepted drafts in the
    verifier's cache, and the counts are kept (verifying.verify_logits over every row).
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
