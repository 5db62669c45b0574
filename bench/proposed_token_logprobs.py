"""Proposed replacement for grpo_fixed.token_logprobs (drop-in text: the block between the markers).

Benchmarked by bench/run.py as "proto: autograd.Function (fused)". Why it is faster and leaner than
picked - logsumexp (see bench/why_logsumexp.py): on CPU torch.logsumexp is a composite of separate
kernels whose exp is the accurate Sleef exp, about twice the cost of the fused log_softmax kernel;
and its autograd path builds a full-size gradient per branch (gather's zeros + scatter, the split's
concatenation) before adding them. Here the forward is chunked log_softmax + gather, the backward
writes g * (onehot(token) - softmax(logits)) straight into the one gradient tensor, and chunks also
split along T, so one long sequence (B = 1) never gets a logits-sized temporary either.
"""

from __future__ import annotations

import torch

# ---- proposed for grpo_fixed.py (replaces LOGSUMEXP_CHUNK and token_logprobs) ------------------------

LOGPROB_CHUNK = 1 << 19
"""logits elements per chunk (2 MB of float32, about an L2 cache): forward and backward go chunk by
chunk, so the only logits-sized tensor ever allocated is the gradient itself"""


def _chunks(logits, *aligned):
    """Aligned pieces of logits (..., T, V) and of tensors sharing its (..., T) dims, about LOGPROB_CHUNK
    elements each: whole rows (r, T, V) when a (T, V) slice fits, else (t, V) slices of one row."""
    lead = logits.dim() - 3  # leading dims before (T, V), flattened to one row dim R
    tensors = [t.flatten(0, lead) if lead >= 0 else t[None] for t in (logits, *aligned)]  # (R, T[, V]) each
    R, T, V = tensors[0].shape
    if T * V <= LOGPROB_CHUNK:
        return zip(*[t.split(max(1, LOGPROB_CHUNK // (T * V))) for t in tensors], strict=True)
    step = max(1, LOGPROB_CHUNK // V)
    return zip(*[[piece for row in t.unbind(0) for piece in row.split(step)] for t in tensors], strict=True)


class _TokenLogprobs(torch.autograd.Function):
    """log pi(token) = log_softmax(logits)[token];  d/dlogits = g * (onehot(token) - softmax(logits))."""

    @staticmethod
    def forward(ctx, logits, tokens):
        out = logits.new_empty(tokens.shape)  # (..., T)
        for lg, tk, o in _chunks(logits, tokens, out):
            o.copy_(torch.log_softmax(lg, dim=-1).gather(-1, tk.unsqueeze(-1)).squeeze(-1))
        ctx.save_for_backward(logits, tokens)  # references: nothing logits-sized is stored
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, tokens = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)  # (..., T, V)
        for lg, tk, g, gl in _chunks(logits, tokens, grad_out, grad):
            torch.softmax(lg, dim=-1, out=gl).mul_(-g.unsqueeze(-1))  # -g * softmax, in place
            gl.scatter_add_(-1, tk.unsqueeze(-1), g.unsqueeze(-1))  # + g at the picked token
        return grad, None


def token_logprobs(logits, tokens):
    """log pi(token_t) = logits[t, token_t] - logsumexp_v logits[t, v], as log_softmax (stable: it
    subtracts the row max) chunk by chunk; logits (..., T, V) aligned to tokens (..., T) -> (..., T)."""
    return _TokenLogprobs.apply(logits, tokens)  # FIX B7: log(softmax) gives -inf

# ---- end of proposal ----------------------------------------------------------------------------------
