"""A call's layout: each row's causal prefix and region, padding that sees only itself."""

import torch

from workloads.decoding.layout import Layout


def test_a_layout_keeps_each_rows_prefix_and_hides_padding():
    layout = Layout.of(torch.tensor([2, 0]), torch.tensor([2, 3]), bidirectional=True, keep_region=False)
    assert layout.kept.tolist() == [2, 0]
    first = layout.among[0].int().tolist()
    assert first == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]  # region both ways
    second = layout.among[1].int().tolist()
    assert second[3] == [0, 0, 0, 1] and second[0] == [1, 1, 1, 0]  # the padding row sees itself only
