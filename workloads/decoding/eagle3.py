"""EAGLE-3 drafting (arXiv 2503.01840) as vLLM serves it: one decoder layer that reads three of
the verifier's hidden states and drafts a chain, one token a pass.

Its checkpoint is vLLM's: a Llama-style `config.json` naming the verifier's layers it reads
(`eagle_aux_hidden_state_layer_ids`, counted as layers run: id k is the residual stream after
k decoder layers, the output of the verifier's layer k − 1) and safetensors named `fc`,
`midlayer.*` and `norm`; it shares the verifier's embeddings and LM head.

A pass over rows (x, t, p) of hidden input x, token t and position p:

    u = [RMS_in(E t), RMS_hid(x)]              (2H: the embedding first)
    r = W_o attn(W_q u, W_k u, W_v u; RoPE at p, keys at positions <= p) + x
    pre = W_down(silu(W_gate RMS_post(r)) · W_up RMS_post(r)) + r
    logits = head(RMS_norm(pre))

A draft of W tokens: a first pass over the newly verified positions p, each with
x = fc([h_a(p) for the read layers a]) and the token after it (the last verified position's is
the newest token), whose last row drafts d_1; then W − 1 passes of one row each with x = the
previous pass's `pre`, t = the previous draft, p + 1. The drafter's keys are cached by
position: a verified position's are written by its first pass, and a chain's, past the
verified prefix, are rewritten before anything reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from workloads.decoding.network import Meter

CONFIG_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "rms_norm_eps", "rope_parameters", "eagle_aux_hidden_state_layer_ids")


def is_eagle3(config: dict) -> bool:
    """An EAGLE-3 drafter's config.json: it names the verifier layers it reads."""
    return "eagle_aux_hidden_state_layer_ids" in config or any(
        "Eagle3" in a for a in config.get("architectures") or ())


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS_w(x) = x / sqrt(mean(x²) + eps) · w, in float32 as vLLM's CPU norm computes it."""
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (Llama's rotate-half form) of x (R, heads, T, D) at positions (R, T):
    x cos(p f) + rotate_half(x) sin(p f), f_i = theta^(-2i/D)."""
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    angles = positions.float()[..., None] * freq  # (R, T, D/2)
    cos, sin = torch.cat([angles, angles], -1).cos()[:, None], torch.cat([angles, angles], -1).sin()[:, None]
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return (x.float() * cos + half.float() * sin).to(x.dtype)


class Eagle3Model(nn.Module):
    """The drafter's weights, named as its safetensors hold them."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        h, i = config["hidden_size"], config["intermediate_size"]
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config.get("head_dim") or h // self.heads
        self.eps = config["rms_norm_eps"]
        rope_parameters = config.get("rope_parameters") or {}
        self.theta = float(rope_parameters.get("rope_theta", config.get("rope_theta", 1e4)))
        self.layer_ids = list(config["eagle_aux_hidden_state_layer_ids"])
        self.fc = nn.Linear(len(self.layer_ids) * config.get("target_hidden_size", h), h, bias=False)
        self.midlayer = nn.Module()
        for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
            setattr(self.midlayer, name, _Norm(h))
        attn = self.midlayer.self_attn = nn.Module()
        attn.q_proj = nn.Linear(2 * h, self.heads * self.head_dim, bias=False)
        attn.k_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=False)
        attn.v_proj = nn.Linear(2 * h, self.kv_heads * self.head_dim, bias=False)
        attn.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        mlp = self.midlayer.mlp = nn.Module()
        mlp.gate_proj, mlp.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
        mlp.down_proj = nn.Linear(i, h, bias=False)
        self.norm = _Norm(h)

    @property
    def tapped(self) -> list[int]:
        """The verifier layers (0-based) whose outputs it reads: id k is layer k − 1's output."""
        return [k - 1 for k in sorted(self.layer_ids)]

    def layer(self, x: torch.Tensor, embedded: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
              values: torch.Tensor, seen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """One pass over rows x, embedded (R, T, H) at positions (R, T), attending the given
        `keys`/`values` (R, kv heads, N, D) and its own rows as `seen` (R, T, N + T) allows.
        Returns (pre (R, T, H), normed (R, T, H), its own (keys, values))."""
        m, attn = self.midlayer, self.midlayer.self_attn
        r, t, _ = x.shape
        u = torch.cat([rms(embedded, m.input_layernorm.weight, self.eps),
                       rms(x, m.hidden_norm.weight, self.eps)], -1)
        q = rope(attn.q_proj(u).view(r, t, self.heads, -1).transpose(1, 2), positions, self.theta)
        k = rope(attn.k_proj(u).view(r, t, self.kv_heads, -1).transpose(1, 2), positions, self.theta)
        v = attn.v_proj(u).view(r, t, self.kv_heads, -1).transpose(1, 2)
        all_k, all_v = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            all_k, all_v = all_k.repeat_interleave(rep, 1), all_v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, all_k, all_v, attn_mask=seen[:, None])
        res = attn.o_proj(a.transpose(1, 2).reshape(r, t, -1)) + x
        n = rms(res, m.post_attention_layernorm.weight, self.eps)
        pre = m.mlp.down_proj(F.silu(m.mlp.gate_proj(n)) * m.mlp.up_proj(n)) + res
        return pre, rms(pre, self.norm.weight, self.eps), (k, v)

    @classmethod
    def load(cls, path: Path) -> Eagle3Model:
        """From a checkpoint directory (config.json, model.safetensors); KeyError/ValueError
        naming what does not fit."""
        config = json.loads((path / "config.json").read_text())
        model = cls(config)
        state = {}
        for weights in sorted(path.glob("*.safetensors")):
            state.update(load_file(weights))
        state = {k: v for k, v in state.items() if k not in ("lm_head.weight", "embed_tokens.weight")}
        own = model.state_dict()
        for name, tensor in state.items():
            if name in own and own[name].shape != tensor.shape:
                wanted = tuple(own[name].shape)
                raise ValueError(f"{name} is {tuple(tensor.shape)}; its config makes it {wanted}")
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{missing[0]} missing" if missing else f"{unexpected[0]} unexpected")
        return model.eval()

    def save(self, path: Path) -> None:
        """config.json and model.safetensors, as vLLM's Eagle3LlamaForCausalLM loads them."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(self.config, indent=2) + "\n")
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path / "model.safetensors"))


class _Norm(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class Eagle3Cache:
    """The drafter's keys and values of the rows of one batch, by position: (R, kv heads, N, D)
    each, `positions` (R, N) their positions (−1: none yet)."""

    def __init__(self):
        self.keys = self.values = self.positions = None

    def write(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        """Store a call's keys and values (R, h, T, D) at positions (R, T), replacing those held
        at the same positions or after the call's first (a rewrite drops the chain past it)."""
        if self.keys is None:
            self.keys, self.values, self.positions = keys, values, positions
            return
        kept = self.positions < positions[:, :1]  # (R, N)
        n = int(kept.sum(1).max())
        order = torch.argsort((~kept).int(), dim=1, stable=True)[:, :n]  # the kept first, in order
        gather = order[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        old_k, old_v = self.keys.gather(2, gather), self.values.gather(2, gather)
        old_p = torch.where(kept.gather(1, order), self.positions.gather(1, order), -1)
        self.keys, self.values = torch.cat([old_k, keys], 2), torch.cat([old_v, values], 2)
        self.positions = torch.cat([old_p, positions], 1)

    def view(self, rows: int, model: Eagle3Model, device, dtype) -> tuple[torch.Tensor, ...]:
        if self.keys is None:
            empty = torch.zeros(rows, model.kv_heads, 0, model.head_dim, device=device, dtype=dtype)
            return empty, empty, torch.zeros(rows, 0, dtype=torch.long, device=device)
        return self.keys, self.values, self.positions

    def keep(self, stay: np.ndarray, index: torch.Tensor) -> None:
        """Keep the rows at `stay`, in order (rows.Rows.leave)."""
        if self.keys is not None:
            index = index.to(self.keys.device)
            self.keys, self.values = self.keys[index], self.values[index]
            self.positions = self.positions[index]


class Eagle3Network:
    """An EAGLE-3 drafter serving the rows of one batch: the verifier's embeddings and LM head,
    and the rows' cached keys (`slots`, as rows.Rows.leave expects of a network)."""

    def __init__(self, drafter: Eagle3Model, verifier):
        self.model = drafter
        self.embed = verifier.get_input_embeddings()
        self.head = getattr(verifier, "lm_head", None) or verifier.get_output_embeddings()
        self.device = verifier.device
        self.dtype = next(drafter.parameters()).dtype
        self.slots = Eagle3Cache()
        self.work = Meter()

    def pass_(self, x: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One pass over rows (x, ids, positions) (R, T, ·), cached; (pre, logits) (R, T, ·)."""
        keys, values, at = self.slots.view(x.shape[0], self.model, self.device, self.dtype)
        positions = positions.to(self.device)
        r, t = positions.shape
        # cached keys before the call's first position (those at or past it the call rewrites),
        # and the call's own rows causally
        cached = (at >= 0) & (at < positions[:, :1])
        seen = torch.cat([cached[:, None, :].expand(-1, t, -1),
                          torch.ones(t, t, dtype=torch.bool, device=self.device).tril().expand(r, -1, -1)], 2)
        embedded = self.embed(ids.to(self.device)).to(self.dtype)
        pre, normed, (k, v) = self.model.layer(x.to(self.dtype), embedded, positions, keys, values, seen)
        self.slots.write(k, v, positions.to(self.device))
        return pre, self.head(normed.to(self.head.weight.dtype)).float()

    def close(self) -> None:
        """Nothing outlives the batch."""
