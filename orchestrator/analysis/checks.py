"""What `export` does to its files once they are written, as the user asked: each config's
predicted vLLM speed, SGLang's parser reading its flags, by_batch_size.yaml's drafts schedule
measured at its switches, each vLLM setting decoded in vLLM. The tools they need are checked
before anything is written (`ExportChecks.ready`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportChecks:
    """The checks one `export` asked for: `verify_vllm` prompts decoded in vLLM per config (0:
    none), SGLang's parser, `check_schedule` loads a side at each switch (0: none), and a
    calibrated vLLM speed model (analysis.prediction.Predictor) or None."""

    verify_vllm: int = 0
    check_sglang: bool = False
    check_schedule: int = 0
    predictor: object | None = None

    def ready(self) -> None:
        """Fail in one line when a tool a check needs is not set up (`make vllm`)."""
        if self.verify_vllm or self.check_schedule:
            from workloads.serving.venv import vllm_python

            vllm_python()
        if self.check_sglang:
            from workloads.serving.sglang_flags import parser_path

            parser_path()

    def run(self, out: Path, paths: list[Path], uri: str | None, logs: Path,
            say: Callable[[str], None]) -> bool:
        """Every asked check on the files `paths` written into `out` (the sweep's MLflow store at
        `uri`, servers logging under `logs`); whether vLLM and SGLang read them as measured."""
        passed = True
        if self.predictor is not None:
            from orchestrator.analysis.prediction import predict_exports

            predict_exports(paths, self.predictor, say)
        if self.check_sglang:
            from orchestrator.analysis.verify import check_sglang_exports

            passed &= check_sglang_exports(paths, say)
        if self.check_schedule:
            from orchestrator.analysis.schedulecheck import check_exported_schedule

            check_exported_schedule(out, uri, self.check_schedule, say, logs)
        if self.verify_vllm:
            from orchestrator.analysis.verify import verify_exports

            passed &= verify_exports(out, paths, uri, self.verify_vllm, say, logs)
        return passed
