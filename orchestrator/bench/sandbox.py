"""What the sandbox costs: HumanEval's canonical solutions run in this process (trusted
code) and through the sandbox, interleaved so drift falls on both alike."""

from __future__ import annotations

import contextlib
import io
import time


def sandbox_overhead(n: int) -> dict:
    """{problems, passed, layers, inline_ms, sandboxed_ms}: mean wall time per problem."""
    from workloads.tasks import get_task
    from workloads.tasks.sandbox import run_python

    task = get_task("humaneval")
    inline = confined = 0.0
    passed = 0
    examples = task.examples(n=n, seed=0)
    for ex in examples:
        program, checks = task.program(ex, ex.reference)
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(program + checks.source, ex.meta["task_id"], "exec"), {"__name__": "__main__"})
        inline += time.perf_counter() - start
        run = run_python(program, checks=checks)
        confined += run.wall_s
        passed += run.passed
    count = len(examples)
    return {"problems": count, "passed": passed, "layers": run.layers,
            "inline_ms": 1000 * inline / count, "sandboxed_ms": 1000 * confined / count}


def table(r: dict) -> list[str]:
    """The lines `specsweep bench sandbox` prints from `sandbox_overhead`'s figures."""
    return [f"{r['problems']} HumanEval canonical solutions, {r['passed']} passed in the sandbox "
            f"({r['layers']})",
            f"in process   {r['inline_ms']:8.2f} ms/problem",
            f"sandboxed    {r['sandboxed_ms']:8.2f} ms/problem",
            f"overhead     {r['sandboxed_ms'] - r['inline_ms']:8.2f} ms/problem "
            f"({r['sandboxed_ms'] / max(r['inline_ms'], 1e-9):.0f}x)"]
