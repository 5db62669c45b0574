"""A tiny causal language model and a character tokenizer, with the interface of a model library.

The trainer imports this file the way a real hand-out imports `transformers`:

    tokenizer = CharTokenizer.from_pretrained(path)
    batch = tokenizer(["12+7=", "3+4="], padding_side="left")      # input_ids, attention_mask: (N, L)
    model = TinyLM.from_pretrained(path)
    logits = model(input_ids, attention_mask=mask, position_ids=pos).logits   # (N, L, V)
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)

As in GPT-2 and many other Hugging Face models (not all: some derive positions from the mask in their forward),
`position_ids` default to 0..L-1 for every row, whatever the attention mask says: a left-padded row must be given
its positions (`attention_mask.cumsum(-1) - 1`), or its real tokens sit at shifted positions; with learned
absolute positions, as here, that changes the row's logits. (Hugging Face's `generate()` derives them from the
attention mask by itself, in the model's `prepare_inputs_for_generation`; a hand-written forward pass for
training must do the same.)
The attention mask hides padded keys; a query always sees itself, so a padded row's outputs stay finite (and
meaningless). `past_key_values` / `use_cache` give the usual key-value cache.

Model: decoder-only transformer, pre-LayerNorm blocks, learned absolute position embeddings, tied input and
output embeddings. Sizes live in `TinyLMConfig`; a checkpoint is a folder with config.json, vocab.json and
model.pt.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


# ---- Tokenizer -----------------------------------------------------------------------------------
class CharTokenizer:
    """One token per character of `alphabet`, after the special tokens PAD = 0, BOS = 1, EOS = 2."""

    def __init__(self, alphabet: str):
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise ValueError(f"alphabet must be nonempty characters without repeats, got {alphabet!r}")
        self.alphabet = alphabet
        self.tokens = [PAD, BOS, EOS, *alphabet]
        self.token_to_id = {t: i for i, t in enumerate(self.tokens)}
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, 2

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset((self.pad_token_id, self.bos_token_id, self.eos_token_id))

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """[BOS] + one id per character; ValueError for a character outside the alphabet."""
        unknown = sorted(set(text) - set(self.alphabet))
        if unknown:
            raise ValueError(f"characters {unknown} are not in the tokenizer's alphabet {self.alphabet!r}")
        return [self.bos_token_id] * add_bos + [self.token_to_id[c] for c in text]

    def __call__(self, texts: list[str], padding_side: str = "left", add_bos: bool = True) -> dict:
        """Encode and pad to the longest text. -> {"input_ids": (N, L) long, "attention_mask": (N, L) long},
        attention_mask 1 on real tokens and 0 on padding, padding on the left (default) or the right."""
        if isinstance(texts, str) or not texts:
            raise ValueError("texts must be a nonempty list of strings")
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        rows = [self.encode(t, add_bos) for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)  # (N, L)
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # (N, L)
        for i, row in enumerate(rows):
            span = slice(width - len(row), width) if padding_side == "left" else slice(0, len(row))
            ids[i, span], mask[i, span] = torch.tensor(row, dtype=torch.long), 1
        return {"input_ids": ids, "attention_mask": mask}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """The characters of `ids`; special tokens dropped with skip_special_tokens, else spelled out."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        out = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
            if not (skip_special_tokens and i in self.special_ids):
                out.append(self.tokens[i])
        return "".join(out)

    def batch_decode(self, ids, skip_special_tokens: bool = False) -> list[str]:
        """decode() of every row of a (N, T) tensor or list of lists."""
        return [self.decode(row, skip_special_tokens) for row in ids]

    def save_pretrained(self, path: Path | str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "vocab.json").write_text(json.dumps({"alphabet": self.alphabet}) + "\n")

    @classmethod
    def from_pretrained(cls, path: Path | str) -> CharTokenizer:
        return cls(json.loads((Path(path) / "vocab.json").read_text())["alphabet"])


# ---- Model ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int
    """tokens, special ones included"""
    max_positions: int = 32
    """learned position embeddings: positions 0 .. max_positions - 1"""
    d_model: int = 64
    """width of the residual stream"""
    n_layers: int = 2
    """transformer blocks"""
    n_heads: int = 4
    """attention heads per block (d_model must divide by it)"""
    dropout: float = 0.0
    """dropout on attention weights and on each block's residual branches"""


class CausalLMOutput(NamedTuple):
    logits: torch.Tensor
    """(N, L, V): position l scores the token at l + 1"""
    past_key_values: tuple | None = None
    """per layer (keys, values), each (N, heads, L_total, d_head), when use_cache"""


class SelfAttention(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, allowed, past=None):
        """x (N, L, D); allowed (N, 1, L, L_total) bool, True where a query may attend to a key."""
        N, L, D = x.shape
        q, k, v = (t.view(N, L, self.n_heads, D // self.n_heads).transpose(1, 2)
                   for t in self.qkv(x).split(D, dim=2))  # each (N, H, L, Dh)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (N, H, L_total, Dh)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.n_heads)  # (N, H, L, L_total)
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)  # (N, H, L, L_total)
        y = F.dropout(weights, self.dropout, self.training) @ v  # (N, H, L, Dh)
        return self.out(y.transpose(1, 2).reshape(N, L, D)), (k, v)


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, allowed, past=None):
        a, present = self.attn(self.ln1(x), allowed, past)
        x = x + self.drop(a)
        return x + self.drop(self.mlp(self.ln2(x))), present


class TinyLM(nn.Module):
    """input_ids (N, L) -> CausalLMOutput(logits (N, L, V), past_key_values)."""

    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError(f"d_model {cfg.d_model} must be divisible by n_heads {cfg.n_heads}")
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.apply(_init_weights)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache: bool = False) -> CausalLMOutput:
        """attention_mask (N, L_past + L): 1 for real tokens, 0 for padding (default: all 1).
        position_ids (N, L): default past length + 0..L-1 in every row, padding or not."""
        N, L = input_ids.shape
        past_len = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(N, past_len + L, dtype=torch.long, device=input_ids.device)
        if attention_mask.shape != (N, past_len + L):
            raise ValueError(f"attention_mask must be ({N}, {past_len + L}), got {tuple(attention_mask.shape)}")
        if position_ids is None:
            position_ids = torch.arange(past_len, past_len + L, device=input_ids.device).expand(N, L)
        if int(position_ids.max()) >= self.config.max_positions or int(position_ids.min()) < 0:
            raise ValueError(f"position ids must lie in [0, {self.config.max_positions}), "
                             f"got [{int(position_ids.min())}, {int(position_ids.max())}]")
        allowed = attention_allowed(attention_mask.bool(), L)  # (N, 1, L, L_total)
        x = self.drop(self.tok_emb(input_ids) + self.pos_emb(position_ids))  # (N, L, D)
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, allowed, past_key_values[i] if past_key_values is not None else None)
            presents.append(present)
        logits = self.ln_f(x) @ self.tok_emb.weight.T  # (N, L, V), tied embeddings
        return CausalLMOutput(logits, tuple(presents) if use_cache else None)

    def save_pretrained(self, path: Path | str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "config.json").write_text(json.dumps(asdict(self.config), indent=1) + "\n")
        torch.save(self.state_dict(), Path(path) / "model.pt")

    @classmethod
    def from_pretrained(cls, path: Path | str, **overrides) -> TinyLM:
        """The saved model; overrides replace fields of its TinyLMConfig that leave the weights' shapes alone
        (dropout)."""
        config = json.loads((Path(path) / "config.json").read_text())
        unknown = sorted(set(overrides) - {"dropout"})
        if unknown:
            raise ValueError(f"from_pretrained can override only dropout, got {unknown}")
        model = cls(TinyLMConfig(**{**config, **overrides}))
        model.load_state_dict(torch.load(Path(path) / "model.pt", weights_only=True))
        return model


def attention_allowed(key_mask: torch.Tensor, n_queries: int) -> torch.Tensor:
    """Causal attention over non-padded keys: query i (the last n_queries positions) may attend to key j
    when j <= i and key_mask[j]; always to itself, so no row is empty. key_mask (N, L_total) ->
    (N, 1, n_queries, L_total) bool."""
    total = key_mask.shape[1]
    q_index = torch.arange(total - n_queries, total, device=key_mask.device)[:, None]  # (L, 1)
    k_index = torch.arange(total, device=key_mask.device)[None, :]  # (1, L_total)
    causal = k_index <= q_index  # (L, L_total)
    return ((causal & key_mask[:, None, :]) | (k_index == q_index))[:, None]  # (N, 1, L, L_total)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

