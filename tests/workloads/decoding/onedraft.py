"""One draft verified: `acceptance.verify_rows` on a batch of one, as the acceptance tests
read it."""

from typing import NamedTuple

import torch

from workloads.decoding.acceptance import verify_rows


class Verification(NamedTuple):
    """How many leading drafted tokens were kept, and the recovered token at the first
    rejection or the bonus after a fully accepted draft."""

    accepted: int
    token: int


def verify(rule: str, p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor,
           noise: torch.Tensor, leniency: float = 0.0) -> Verification:
    """p (B + 1, V), q (B, V), draft (B,), uniforms (B,), noise (B + 1, V)."""
    length = torch.tensor([draft.shape[0]])
    accepted, token = verify_rows(rule, p[None], q[None], draft[None], length, uniforms[None], noise[None],
                                  leniency)
    return Verification(int(accepted[0]), int(token[0]))
