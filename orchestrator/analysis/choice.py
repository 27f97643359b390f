"""Choosing among frontier rows: the speed a sweep ranks by, `--pick`, the routing table
(the fastest row per load and accuracy floor) and one row per batch size.

Speed is ranked by the sweep's own speed objective (`speed_metric`): under the ratio against
the controls timed beside each trial, a trial that ran while the machine was fast does not
outrank one that ran while it was slow, as raw tokens/s would let it. Ties go to accuracy, so a
chosen row is never beaten on both speed and accuracy by another row it was chosen from."""

from __future__ import annotations

from orchestrator.stored import load_order, row_load

PICKS = ("all", "fastest", "most-accurate", "knee")
FLOORS = (0.5, 0.75, 0.9, 0.95, 0.99)
# speed metrics an objective can name, larger faster; the first a sweep optimises is its speed
SPEEDS = ("throughput_ratio", "request_goodput", "throughput_tps", "request_throughput")


def speed_metric(objectives: dict[str, str], rows: list[dict]) -> str:
    """The metric speed is ranked by: the first of SPEEDS the sweep maximises; without one,
    throughput_ratio where every row carries it, else throughput_tps."""
    for metric in SPEEDS:
        if objectives.get(metric) == "max":
            return metric
    if rows and all("throughput_ratio" in r["metrics"] for r in rows):
        return "throughput_ratio"
    return "throughput_tps"


def _rank(speed: str):
    """A row's key, larger better: (speed, accuracy)."""
    return lambda r: (r["metrics"].get(speed, 0.0), r["metrics"].get("accuracy", 0.0))


def pick(rows: list[dict], how: str, speed: str) -> list[dict]:
    """Choose among frontier rows by `speed` and accuracy: `fastest` (ties to the more
    accurate); `most-accurate` (ties to the faster); `knee`, the row farthest from the straight
    line between those two after scaling both metrics to [0, 1]; or `all`."""
    if how not in PICKS:
        raise ValueError(f"--pick: one of {', '.join(PICKS)}; got {how!r}")
    if how == "all" or len(rows) <= 1:
        return rows
    fast = lambda r: r["metrics"].get(speed, 0.0)  # noqa: E731
    quality = lambda r: r["metrics"].get("accuracy", 0.0)  # noqa: E731
    fastest = max(rows, key=_rank(speed))
    accurate = max(rows, key=lambda r: (quality(r), fast(r)))
    if how == "fastest":
        return [fastest]
    if how == "most-accurate":
        return [accurate]
    xs, ys = [fast(r) for r in rows], [quality(r) for r in rows]

    def scaled(r):
        x_span, y_span = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
        return (fast(r) - min(xs)) / x_span, (quality(r) - min(ys)) / y_span

    (x1, y1), (x2, y2) = scaled(fastest), scaled(accurate)

    def distance(r):  # |cross product| / |line|: distance to the line fastest–accurate
        x, y = scaled(r)
        return abs((x2 - x1) * (y1 - y) - (x1 - x) * (y2 - y1)) / (
            ((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5 or 1.0
        )

    return [max(rows, key=distance)]


def routes(rows: list[dict], speed: str, floors: tuple[float, ...] = FLOORS) -> list[dict]:
    """For each load (batch size, and request rate where one was set) and accuracy floor, the
    fastest row by `speed` at that load meeting it (ties to the more accurate; None when no row
    does): the routing table for serving queries at different quality requirements and
    concurrencies. No row of the same load meeting the floor is both faster and more accurate."""
    table = []
    for key in sorted({row_load(r) for r in rows}, key=load_order):
        for floor in floors:
            ok = [r for r in rows if row_load(r) == key and r["metrics"].get("accuracy", -1.0) >= floor]
            best = max(ok, key=_rank(speed)) if ok else None
            table.append(
                {
                    "batch_size": key[0],
                    **({"request_rate": key[1]} if key[1] is not None else {}),
                    "accuracy_floor": floor,
                    "trial": best and best["trial"],
                    "file": best and f"trial{best['trial']}.yaml",
                    "ranked_by": speed,
                    speed: best and best["metrics"].get(speed),
                    "throughput_tps": best and best["metrics"].get("throughput_tps"),
                    "accuracy": best and best["metrics"].get("accuracy"),
                }
            )
    return table


def by_batch_size(rows: list[dict], how: str, speed: str) -> dict[int, dict]:
    """Batch size -> the row chosen at that batch size by `how` (`all` chooses the fastest,
    since a serving engine takes one setting per batch size)."""
    sizes = sorted({r.get("batch_size", 1) for r in rows})
    rule = "fastest" if how == "all" else how
    return {size: pick([r for r in rows if r.get("batch_size", 1) == size], rule, speed)[0] for size in sizes}
