"""Public implementations of per-token log-probs, rewritten here (same operations, same order) to
benchmark bench/token_logprobs.py against them. Each takes logits (..., T, V) and tokens (..., T)
and returns log softmax(logits)[token] with shape (..., T).

Sources (read in November 2026):
- naive: log_softmax then gather; verl `logprobs_from_logits_naive` (volcengine/verl,
  verl/utils/torch_functional.py), also the eager body of OLMo-core's `selective_log_softmax`
  (allenai/OLMo-core, src/olmo_core/generate/utils.py) and of the compiled one below.
- TRL `selective_log_softmax` (huggingface/trl, trl/trainer/utils.py; float32/64 branch): gather the
  picked logits, logsumexp one batch row at a time ("loop to reduce peak mem consumption"), subtract.
  verl's `logprobs_from_logits_v2` (same file as above) is the identical algorithm.
- OpenRLHF `log_probs_from_logits` (OpenRLHF/OpenRLHF, openrlhf/models/utils.py), its fallback
  without flash-attn: flatten to (N, V), logsumexp 1024 rows at a time into a preallocated buffer.
- cross-entropy: -F.cross_entropy(..., reduction="none"), how many codebases get token log-probs
  (e.g. Hugging Face transformers' loss path); fused log_softmax + nll_loss in one ATen call.
- compiled: OLMo-core's `selective_log_softmax` is the naive body under @torch.compile(dynamic=True)
  (unsloth's compiled copy of TRL's function is the same idea): inductor fuses log_softmax and
  gather, so the (..., T, V) log-probs are never written out. Needs a C++ compiler; first call compiles.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def naive_log_softmax_gather(logits, tokens):
    """log_softmax(logits)[token]; materialises a second (..., T, V) tensor. verl / OLMo-core eager."""
    logprobs = F.log_softmax(logits, dim=-1)  # (..., T, V)
    return logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (..., T)


def trl_selective_log_softmax(logits, tokens):
    """TRL selective_log_softmax (float32/64 branch): picked - logsumexp, one batch row at a time."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
    lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # (B, T), one (T, V) temp at a time
    return picked - lse


def openrlhf_log_probs_from_logits(logits, tokens, chunk_rows: int = 1024):
    """OpenRLHF log_probs_from_logits without flash-attn: logsumexp over 1024 flattened rows at a time."""
    vocab = logits.shape[-1]
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # (..., T)
    flat = logits.reshape(-1, vocab)  # (N, V)
    lse = torch.zeros(flat.shape[0], dtype=logits.dtype, device=logits.device)  # (N,)
    for start in range(0, flat.shape[0], chunk_rows):
        lse[start : start + chunk_rows] = torch.logsumexp(flat[start : start + chunk_rows], dim=-1)
    return picked - lse.view(picked.shape)


def cross_entropy_logprobs(logits, tokens):
    """-cross_entropy(logits, tokens) per token: one fused ATen call (log_softmax + nll_loss)."""
    vocab = logits.shape[-1]
    nll = F.cross_entropy(logits.reshape(-1, vocab), tokens.reshape(-1), reduction="none")  # (N,)
    return -nll.view(tokens.shape)


_compiled = None


def compiled_selective_log_softmax(logits, tokens):
    """OLMo-core selective_log_softmax: the naive body under torch.compile(dynamic=True)."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(naive_log_softmax_gather, dynamic=True)
    return _compiled(logits, tokens)


def compile_problem() -> str | None:
    """None if torch.compile works here (forward and backward on a tiny input), else why not."""
    try:
        logits = torch.randn(2, 3, 5, requires_grad=True)
        compiled_selective_log_softmax(logits, torch.zeros(2, 3, dtype=torch.long)).sum().backward()
    except Exception as e:  # no C++ compiler, unsupported platform, ...: report and benchmark the rest
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    return None


PUBLIC = {
    "naive log_softmax+gather (verl naive)": naive_log_softmax_gather,
    "TRL selective_log_softmax (= verl v2)": trl_selective_log_softmax,
    "OpenRLHF log_probs_from_logits": openrlhf_log_probs_from_logits,
    "-F.cross_entropy": cross_entropy_logprobs,
}
"""eager public implementations, label -> function"""

COMPILED = {"torch.compile naive (OLMo-core)": compiled_selective_log_softmax}
"""needs inductor (a C++ compiler) and a long first call; benchmarked unless --no-compile"""
