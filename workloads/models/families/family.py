"""A drafter family: how a pair spec is recognised as one of its pairs (read from the spec
and local configs, without loading), how such a pair loads, and what a serving engine needs
beyond its kind's method to run its drafter as measured. The pair's decoding (its schedules,
networks and program) is its kind's (workloads/decoding/kinds.py); `families.FAMILIES` holds
one object per family, and `family_of(kind)` reaches a kind's family."""

from __future__ import annotations

from workloads.decoding.kinds import PairKind


class Family:
    """One family; subclasses set `kinds` and implement `kind_of` and `load`, and override
    the serving hooks where their drafters need more than the kind's method."""

    kinds: tuple[PairKind, ...]  # the kinds of its pairs

    def kind_of(self, keys: set[str], spec: dict) -> PairKind | None:
        """The kind of a resolved pair spec (`keys`: its model keys) when the pair is one of
        this family's, else None."""
        raise NotImplementedError

    def load(self, name: str, spec: dict, options: dict, device):
        """The pair this spec names, loaded (a PairError in one line when it cannot); its
        kind is the loaded pair's (`kind_of` reads the same from the spec without loading)."""
        raise NotImplementedError

    def vllm_settings(self, kind: PairKind, config: dict) -> dict:
        """vLLM `speculative_config` keys of a stored specsweep `config` beyond the method, the
        drafter and its number of speculative tokens."""
        return {}

    def sglang_gap(self, kind: PairKind, config: dict) -> str | None:
        """Why SGLang cannot run `config` as vLLM does (then no SGLang flags), or None."""
        return None

    def specsweep_only(self, config: dict, drafter: str | None) -> list[str]:
        """Settings of `config` on `drafter` that no serving engine has, as `name value`."""
        return []

    def cpu_port(self, method: str, drafter: str | None) -> str | None:
        """The family's name where vLLM's CPU build drafts `method` on `drafter` only with the
        project's plugin (vLLM's V2 model runner only), else None."""
        return None
