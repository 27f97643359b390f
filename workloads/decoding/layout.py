"""What one model call over every live row of a batch is: its ids and positions, which of its
rows each row sees (`among`), which it keeps in the cache, and which are real (the rest is
padding). `Layout` is the shape of a call whose rows are a causal prefix and a region,
built once per shape; `Call` is one call, handed to a network whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Call:
    """One forward over every live row: ids and positions (L, Q); among (L, Q, Q) bool, row j
    of a row's call visible to its row i (None: causal); kept (L,) how many of its new rows
    each row keeps, its first (None: recorded once the caller knows, SlotCache.keep_first);
    real (L,) the rows each row evaluates (the rest padding); served (L,) bool, if given,
    the rows the call counts as served (a drafting row whose canvas is full rides along)."""

    ids: torch.Tensor
    positions: torch.Tensor
    among: torch.Tensor | None
    kept: np.ndarray | None
    real: torch.Tensor
    served: torch.Tensor | None = None


_LAYOUTS: dict[tuple, Layout] = {}


@dataclass(frozen=True)
class Layout:
    """The rows of one call for every live row, left-aligned and padded to Q = max(prefix +
    region): a causal prefix of `prefix` (L,) rows (kept in the cache), then a region of
    `region` (L,) rows that sees the prefix and, bidirectionally or causally, itself (kept or
    dropped). Padding rows see themselves only and are never kept."""

    among: torch.Tensor  # (L, Q, Q) bool
    kept: np.ndarray  # (L,) the rows each row keeps: its prefix, or all its rows
    real: torch.Tensor  # (L,) rows each row evaluates
    starts: torch.Tensor  # (L,) the region's first column
    start: int | None  # the region's first column when every row's is the same
    even: bool  # every row has the same prefix and region: nothing is padding

    @classmethod
    def of(cls, prefix: torch.Tensor, region: torch.Tensor, bidirectional: bool, keep_region: bool) -> Layout:
        """The layout, built once per shape: an iteration's calls repeat a few of them."""
        key = (tuple(prefix.tolist()), tuple(region.tolist()), bidirectional, keep_region)
        found = _LAYOUTS.get(key)
        if found is None:
            if len(_LAYOUTS) >= 4096:
                _LAYOUTS.clear()
            found = _LAYOUTS[key] = cls._build(*key)
        return found

    @classmethod
    def _build(cls, prefixes: tuple[int, ...], regions: tuple[int, ...], bidirectional: bool,
               keep_region: bool) -> Layout:
        prefix, region = torch.tensor(prefixes), torch.tensor(regions)
        real = prefix + region
        width = int(real.max())
        column = torch.arange(width)
        present = column < real[:, None]  # (L, Q)
        in_region = present & (column >= prefix[:, None])
        sees = column[None, :] <= column[:, None]  # causal (Q, Q)
        if bidirectional:
            sees = sees | (in_region[:, :, None] & in_region[:, None, :])
        among = (present[:, :, None] & present[:, None, :] & sees) | torch.eye(width, dtype=torch.bool)
        kept = (real if keep_region else prefix).numpy()
        start = prefixes[0] if len(set(prefixes)) == 1 else None
        return cls(among, kept, real, prefix, start, start is not None and len(set(regions)) == 1)

    def call(self, ids: torch.Tensor, positions: torch.Tensor, served: torch.Tensor | None = None,
             keep_later: bool = False) -> Call:
        """A call of this layout over ids and positions (L, Q); keep_later: what each row
        keeps is recorded after the call (a verification keeps the accepted rows)."""
        return Call(ids, positions, self.among, None if keep_later else self.kept, self.real, served)

    def region_rows(self, values: torch.Tensor, rows: int) -> torch.Tensor:
        """values (L, Q, ...) at each row's region columns start .. start + rows − 1 (clamped
        into Q past a short region's end): (L, rows, ...)."""
        first = self.start
        if first is not None and first + rows <= values.shape[1]:  # one start: a view
            return values[:, first:first + rows]
        return columns(values, self.starts, rows)


def columns(values: torch.Tensor, starts: torch.Tensor, count: int) -> torch.Tensor:
    """values (L, Q, ...) at each row's columns starts[i] .. starts[i] + count − 1, clamped into
    Q past its end: (L, count, ...)."""
    index = (starts[:, None] + torch.arange(count)).clamp(max=values.shape[1] - 1).to(values.device)
    return values.gather(1, index.view(*index.shape, *[1] * (values.dim() - 2)).expand(
        -1, -1, *values.shape[2:]))
