"""The parent run's plots drawn from trial summaries, without a sweep."""

from orchestrator.analysis.plots import acceptance_figure


def test_the_acceptance_figure_draws_each_trial_over_its_draft_positions():
    fig = acceptance_figure({"trial 3": [0.8, 0.5], "trial 7": [0.9, 0.6, 0.2]})
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["trial 3", "trial 7"]
    assert [list(line.get_xdata()) for line in lines] == [[1, 2], [1, 2, 3]]
    assert [list(line.get_ydata()) for line in lines] == [[0.8, 0.5], [0.9, 0.6, 0.2]]
