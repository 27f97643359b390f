"""What the project's vLLM plugin (infra/vllm/plugin) reports of a server's processes: the
kernel it checked, what it worked around, and which drafters its V1 port drafts."""

from __future__ import annotations


def kernel_check(report: dict) -> str:
    """The plugin's report (VllmServer.report) in one line."""
    if not report:
        return "vLLM kernel check: no report (the plugin did not run; run `make vllm`)"
    drafter = report.get("drafter")
    port = f"; drafted by the plugin's V1 port {drafter}" if drafter else ""
    if not report.get("rms_norm_row_zero_defect"):
        return "vLLM kernel check: rms_norm is right; nothing worked around" + port
    if not report.get("workaround", True):
        return ("vLLM kernel check: rms_norm row-0 defect found, workaround off "
                "(multi-layer DFlash drafts normalise context K with layer 0's weight)")
    return ("vLLM kernel check: rms_norm row-0 defect found, worked around in "
            + (", ".join(report.get("patched", [])) or "no loaded module") + port)
