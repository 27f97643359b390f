"""DSpark and DFlash 2 drafting in vLLM's V1 model runner, the runner of vLLM's CPU build.

vLLM drafts both only in its V2 GPU model runner (`v1/worker/gpu/spec_decode/dspark`,
`.../dflash2`), which needs Triton, so its CPU build refuses them when the engine starts. Both
draft as DFlash does (context K/V from the verifier's hidden states, one parallel pass over a
block of query tokens) and differ only in how the block's tokens are picked, so each port here
is V1's `DFlashProposer` with V2's picking, greedy (the drafts are point masses: verification
stays lossless at any temperature):

- DSpark (`Qwen3DSparkForCausalLM`): with `sample_from_anchor` the block is the anchor and
  n - 1 noise tokens, every position predicting the next token; the draft is picked left to
  right, d_i = argmax(base_i + markov_bias(markov_embed(d_{i-1}))), d_0 the anchor, over the
  base logits' top k only when `dspark_draft_topk` = k is set.
- DFlash 2 (`DFlash2Qwen3ForCausalLM`): each position's top-k candidates, scored per edge by
  the candidate selector, s_i[p, c] (p the previous position's candidate, the anchor's at i = 0);
  the walk takes c_i = argmax_c s_i[c_{i-1}, c], c_{-1} = 0.

Adaptive verification (DSpark's confidence head) stays refused: V1 verifies whole drafts.
"""

from __future__ import annotations

import torch

from specsweep_vllm import record

DSPARK_ARCHITECTURES = ("Qwen3DSparkModel",)
DFLASH2_ARCHITECTURES = ("DFlash2DraftModel",)
REFUSALS = ("dspark speculative decoding", "DFlash candidate-head drafts")


def family(speculative_config) -> str | None:
    """"dspark" or "dflash2" where this configuration drafts with one of the ports, else None
    (V1's own proposers draft it)."""
    if speculative_config is None or speculative_config.draft_model_config is None:
        return None
    architectures = set(speculative_config.draft_model_config.architectures or ())
    if speculative_config.method == "dspark" and architectures & set(DSPARK_ARCHITECTURES):
        return "dspark"
    if speculative_config.method == "dflash" and architectures & set(DFLASH2_ARCHITECTURES):
        return "dflash2"
    return None


def _define() -> dict[str, type]:
    """The ports by family (classes defined here: they subclass vLLM's proposer, which the
    plugin imports only inside vLLM's processes)."""
    from vllm.v1.spec_decode.dflash import DFlashProposer

    class AnchoredDFlashProposer(DFlashProposer):
        """DFlashProposer that keeps each request's anchor (the verifier's last token) for
        the picking, which conditions on it."""

        def set_inputs_first_pass(self, target_token_ids, next_token_ids, *args, **kwargs):
            self._anchors = next_token_ids
            return super().set_inputs_first_pass(target_token_ids, next_token_ids, *args, **kwargs)

    class DSparkProposer(AnchoredDFlashProposer):
        def __init__(self, vllm_config, device, runner=None):
            spec = vllm_config.speculative_config
            spec.method = "dflash"  # DFlashProposer asserts its method; the drafting is DFlash's
            try:
                super().__init__(vllm_config, device, runner)
            finally:
                spec.method = "dspark"
            hf_config = self.draft_model_config.hf_config
            self.from_anchor = bool(getattr(hf_config, "sample_from_anchor", True))
            self.top_k = getattr(hf_config, "dspark_draft_topk", None)

        def set_inputs_first_pass(self, *args, **kwargs):
            if not self.from_anchor:  # the 1 + n fill-in block: DFlash's layout
                return super().set_inputs_first_pass(*args, **kwargs)
            n = self.num_speculative_tokens
            self.num_speculative_tokens = n - 1  # the anchor then n - 1 noise tokens: n queries
            try:
                num_query, _, cad = super().set_inputs_first_pass(*args, **kwargs)
            finally:
                self.num_speculative_tokens = n
            every_query = torch.arange(num_query, dtype=torch.int32, device=self.device)
            return num_query, every_query, cad

        def _sample_draft_tokens(self, hidden_states, sampling_metadata):
            model = self.model
            n = self.num_speculative_tokens
            base = model.compute_draft_logits(hidden_states).view(-1, n, model.config.draft_vocab_size)
            if self.top_k is not None:
                values, candidates = base.topk(self.top_k, dim=-1)
                base = torch.full_like(base, float("-inf"))
            previous, drafts = self._anchors, []
            for i in range(n):
                embed = model.markov_embed(previous)
                if self.top_k is None:
                    logits = base[:, i] + model.markov_bias(embed)
                else:
                    logits = model.apply_markov_bias_gathered(embed, base[:, i], values[:, i],
                                                              candidates[:, i])
                previous = model.map_draft_to_target(logits.argmax(dim=-1))
                drafts.append(previous)
            return torch.stack(drafts, dim=1).view(-1), None

    class DFlash2Proposer(AnchoredDFlashProposer):
        def _sample_draft_tokens(self, hidden_states, sampling_metadata):
            model = self.model
            n = self.num_speculative_tokens
            candidates, unary = model.compute_candidates(hidden_states)
            top_k = candidates.shape[-1]
            candidates = candidates.view(-1, n, top_k)
            scores = model.model.candidate_selector(candidates, unary.view_as(candidates),
                                                    hidden_states.view(candidates.shape[0], n, -1),
                                                    self._anchors)
            rows = torch.arange(candidates.shape[0], device=candidates.device)
            previous = torch.zeros_like(rows)
            drafts = []
            for i in range(n):
                previous = scores[rows, i, previous].argmax(dim=-1)
                drafts.append(candidates[rows, i, previous])
            return torch.stack(drafts, dim=1).view(-1), None

    return {"dspark": DSparkProposer, "dflash2": DFlash2Proposer}


def install() -> None:
    """Lets V1 start DSpark and DFlash 2 drafts (the config's refusal drops them) and gives
    the CPU model runner the port as its drafter (recorded in the report as `drafter`)."""
    from vllm.config.vllm import VllmConfig
    from vllm.v1.worker import cpu_model_runner

    refused = VllmConfig._get_v1_model_runner_unsupported_features

    def unsupported(self) -> list[str]:
        return [feature for feature in refused(self) if feature not in REFUSALS]

    runner_init = cpu_model_runner.CPUModelRunner.__init__
    ports = _define()

    def init(self, vllm_config, device) -> None:
        runner_init(self, vllm_config, device)
        port = ports.get(family(vllm_config.speculative_config))
        if port is not None:
            with cpu_model_runner._torch_cuda_wrapper():
                self.drafter = port(vllm_config, self.device, self)
            self.use_aux_hidden_state_outputs = True  # the verifier's hidden states, as DFlash
            record(drafter=port.__name__)

    VllmConfig._get_v1_model_runner_unsupported_features = unsupported
    cpu_model_runner.CPUModelRunner.__init__ = init
