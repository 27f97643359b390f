"""The multi-fidelity search on a serving engine: which vLLM settings to time, from their
acceptance measured without serving (workloads/serving/acceptance.py) and the step costs of
the settings timed so far.

A setting s (method, num_speculative_tokens) emits g tokens a step against one without
speculation (its step gain) and verifies W̄ draft tokens a step; at concurrency c a step
costs 1 + y of a step without speculation, so its ratio to vLLM without speculation is
g / (1 + y) and its tokens/s that ratio times the control's. Per method and concurrency,
y = o + b·W̄ with o, b ≥ 0 (o: the method's fixed cost a step, a drafter pass or the
proposer; b: a draft token drafted and verified), each timed setting giving y = g/ratio − 1.
What the timed settings of its method at c allow for an untimed setting's y (`least_cost`):
  none timed: y ≥ 0 (a step with drafts costs at least a plain one);
  one, (W̄₁, y₁): y ≥ y₁·min(1, W̄/W̄₁) (the least of o + b·W̄ over lines through it);
  two or more: the NNLS line, less its error (× (1 − E)).
Its optimistic ratio at c is g / (1 + y_low) · (1 + E), E the error a timing carries. A
setting is timed at c only while that beats the best ratio measured there by more than
`tolerance`: the pick at c is then within `tolerance` of every setting left untimed, as far
as the bounds hold. Ratios, not raw tokens/s, since each is measured against a control
served right beside it: machine drift between timings cancels. The setting with the largest
optimistic gain over the best goes first, timed at every concurrency where it is still
needed (one engine start).

Beside it go the settings of its server start (`starts`: Engine.start_key; a drafter's other
draft lengths where its server drafts them at run time) that its
timing is unlikely to rule out (`beside`): a timing alone costs R loads of the setting and
R + 1 of its control, one beside another R (serving.repeats, controls shared), so a setting
is timed now where the chance that it is still wanted afterwards exceeds R / (2R + 1).
Timing more never changes what the search decides of the rest, only what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

Setting = tuple  # ServingConfig.setting: (method, num_speculative_tokens, DSpark's own two)
TOLERANCE = 0.05
ERROR = 0.15


def least_cost(points: list[tuple[float, float]], width: float, error: float) -> float:
    """The least step cost y at draft width `width` that timed (W̄, y) points of one method
    allow (module docstring)."""
    if not points:
        return 0.0
    if len(points) == 1 or len({w for w, _ in points}) == 1:
        w1, y1 = max(points)
        return max(0.0, y1) * (min(1.0, width / w1) if w1 else 1.0)
    from scipy.optimize import nnls

    (o, b), _ = nnls(np.array([[1.0, w] for w, _ in points]), np.array([y for _, y in points]))
    return (o + b * width) * (1 - error)


@dataclass
class ServingSearch:
    """The search's state: each setting's (g, W̄), the ratios measured per setting and
    concurrency (each against the control served beside it), the controls' tokens/s there.

    Every comparison is made on ratios, so drift of the machine between two timings (the
    controls of one run here moved 2× at one concurrency) cancels; tokens/s are reported as
    ratio × the median control there."""

    gains: dict[Setting, tuple[float, float]]
    concurrencies: list[int]
    tolerance: float = TOLERANCE
    error: float = ERROR
    repeats: int = 1  # R, the loads of a timing (serving.repeats)
    starts: dict[Setting, object] = field(default_factory=dict)  # its server start (Engine.start_key)
    ratios: dict[Setting, dict[int, float]] = field(default_factory=dict)
    costs: dict[tuple[str, int], list[tuple[float, float]]] = field(default_factory=dict)
    control: dict[int, list[float]] = field(default_factory=dict)

    def tell(self, setting: Setting, concurrency: int, tps: float, ratio: float) -> None:
        """A timing of `setting` at `concurrency` beside its control (tokens/s and ratio)."""
        self.ratios.setdefault(setting, {})[concurrency] = ratio
        self.ratios.setdefault(("none", 0), {})[concurrency] = 1.0  # the control itself
        self.control.setdefault(concurrency, []).append(tps / ratio)
        gain, width = self.gains[setting]
        if setting[0] != "none":
            self.costs.setdefault((setting[0], concurrency), []).append((width, gain / ratio - 1))

    def fail(self, setting: Setting, concurrency: int) -> None:
        """A timing that failed: the setting is done there, with a ratio no pick takes."""
        self.ratios.setdefault(setting, {})[concurrency] = 0.0

    def tps(self, ratio: float, concurrency: int) -> float:
        """A ratio at `concurrency` in tokens/s: × the median control there."""
        return ratio * float(np.median(self.control[concurrency]))

    def best(self, concurrency: int) -> float:
        """The largest ratio measured at `concurrency` (0 before any)."""
        return max((r[concurrency] for r in self.ratios.values() if concurrency in r), default=0.0)

    def optimistic(self, setting: Setting, concurrency: int) -> float:
        """The largest ratio `setting` can reach at `concurrency`: g / (1 + y_low) · (1 + E)."""
        gain, width = self.gains[setting]
        y = least_cost(self.costs.get((setting[0], concurrency), []), width, self.error)
        return gain / (1 + y) * (1 + self.error)

    def predicted(self, setting: Setting, concurrency: int) -> float | None:
        """Predicted tokens/s: the cost line of its method there (two timed widths or more),
        else None; without speculation, the median control there."""
        if concurrency not in self.control:
            return None
        if setting[0] == "none":
            return self.tps(1.0, concurrency)
        points = self.costs.get((setting[0], concurrency), [])
        if len({w for w, _ in points}) < 2:
            return None
        gain, width = self.gains[setting]
        return self.tps(gain / (1 + least_cost(points, width, 0.0)), concurrency)

    def wanted(self, setting: Setting) -> list[int]:
        """The concurrencies where `setting` untimed could still beat the best by more than
        the tolerance (all of them before anything is timed there)."""
        done = self.ratios.get(setting, {})
        return [c for c in self.concurrencies
                if c not in done and self.optimistic(setting, c) > self.best(c) * (1 + self.tolerance)]

    def next(self) -> tuple[Setting, list[int]] | None:
        """The setting to time next and where, or None when the picks are decided."""
        def promise(setting: Setting) -> tuple[float, float]:
            gains = [self.optimistic(setting, c) / max(self.best(c), 1e-9) for c in self.wanted(setting)]
            return max(gains), self.gains[setting][0]
        open_ = [s for s in self.gains if s[0] != "none" and self.wanted(s)]
        if not open_:
            return None
        chosen = max(open_, key=promise)
        return chosen, self.wanted(chosen)

    def still_wanted(self, setting: Setting, chosen: Setting, concurrency: int, points: int = 32) -> float:
        """The chance that `setting` is still wanted at `concurrency` once `chosen` is timed
        there, its ratio r taken uniform on (0, optimistic(chosen)]: the share of `points`
        midpoints r_i = (i + ½)/points · optimistic at which it is."""
        top = self.optimistic(chosen, concurrency)
        wanted = 0
        for i in range(points):
            after = replace(self, concurrencies=[concurrency],
                            ratios={s: dict(r) for s, r in self.ratios.items()},
                            costs={k: list(v) for k, v in self.costs.items()},
                            control={c: list(v) for c, v in self.control.items()})
            after.tell(chosen, concurrency, 1.0, (i + 0.5) / points * top)
            wanted += bool(after.wanted(setting))
        return wanted / points

    def beside(self, chosen: Setting, concurrency: int) -> list[Setting]:
        """The settings timed beside `chosen` at `concurrency` (module docstring): another
        setting of its server start (`starts`), wanted there, and still wanted after `chosen`'s
        timing with a chance above R / (2R + 1)."""
        start, share = self.starts.get(chosen), self.repeats / (2 * self.repeats + 1)
        return sorted(s for s in self.gains
                      if s != chosen and start is not None and self.starts.get(s) == start
                      and concurrency in self.wanted(s) and self.still_wanted(s, chosen, concurrency) > share)

    def picks(self) -> dict[int, Setting]:
        """The setting with the largest measured ratio at each concurrency."""
        return {c: max((s for s, r in self.ratios.items() if c in r), key=lambda s: self.ratios[s][c])
                for c in self.concurrencies if any(c in r for r in self.ratios.values())}


def validate(timed: list[dict]) -> list[dict]:
    """The step-cost model left out one configuration at a time: each timed configuration
    ({method, drafts, concurrency, gain, width, ratio}) predicted from the line through the
    others of its method at its concurrency (at least two widths), with its own g and W̄:
    ratio = g / (1 + o + b·W̄). One row per configuration: predicted, measured, error."""
    rows = []
    for held in timed:
        rest = [(t["width"], t["gain"] / t["ratio"] - 1) for t in timed if t is not held
                and (t["method"], t["concurrency"]) == (held["method"], held["concurrency"])]
        if held["method"] == "none" or len({w for w, _ in rest}) < 2:
            continue
        predicted = held["gain"] / (1 + least_cost(rest, held["width"], 0.0))
        rows.append({"method": held["method"], "drafts": held["drafts"], "concurrency": held["concurrency"],
                     "predicted": predicted, "measured": held["ratio"],
                     "error": predicted / held["ratio"] - 1})
    return rows
