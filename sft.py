"""Build the SFT checkpoint the trainer starts from (and keeps as its frozen reference): `make sft`.

A real RL run starts from a model that already answers in the right format and is right some of the time.
This script makes one for the addition task: supervised fine-tuning of a fresh TinyLM on "a+b=" -> answer
EOS, where a fraction SFTConfig.near_miss_prob of the answers is replaced by a near miss (a+b +- 1, +- 2,
+- 10, or |a-b|). The model learns the format and the neighbourhood of the answer, and puts moderate
probability on the right one: its reward at temperature 0.8 starts near 0.3, so GRPO's groups carry signal.

Loss: cross-entropy on the completion tokens (answer and EOS) only, prompts left-padded with the attention
mask and position ids the trainer uses. Deterministic on one thread: the same config rebuilds the same file.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from grpo_fixed import AdditionTask, position_ids
from tinylm import CharTokenizer, TinyLM, TinyLMConfig


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 1000
    """optimizer steps"""
    batch_size: int = 64
    """examples per step"""
    lr: float = 3e-3
    """peak AdamW learning rate"""
    warmup: int = 50
    """linear warm-up steps, then cosine decay to 5 % of lr"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold"""
    near_miss_prob: float = 0.7
    """fraction of examples whose answer is replaced by a near miss"""
    seed: int = 0


NEAR_MISSES = (
    lambda a, b: a + b + 1,
    lambda a, b: a + b - 1,
    lambda a, b: a + b + 2,
    lambda a, b: a + b - 2,
    lambda a, b: a + b + 10,
    lambda a, b: a + b - 10,
    lambda a, b: abs(a - b),
)
"""wrong answers a model of arithmetic plausibly gives; negative results are redrawn as a + b + 1"""


def sft_examples(n, cfg, generator):
    """n prompts "a+b=" and their training answers (a near miss with probability cfg.near_miss_prob)."""
    prompts = AdditionTask().prompts(n, generator)
    answers = []
    for prompt in prompts:
        a, b = (int(x) for x in prompt.rstrip("=").split("+"))
        answer = a + b
        if torch.rand((), generator=generator) < cfg.near_miss_prob:
            pick = int(torch.randint(len(NEAR_MISSES), (), generator=generator))
            answer = NEAR_MISSES[pick](a, b)
            answer = answer if answer >= 0 else a + b + 1
        answers.append(str(answer))
    return prompts, answers


def encode_batch(tokenizer, prompts, answers):
    """Left-padded prompts followed by answer + EOS, right-padded. -> input_ids, attention_mask, targets
    (N, L), targets -100 outside the answer tokens (the loss ignores them); position l predicts l + 1."""
    enc = tokenizer(prompts, padding_side="left")
    width = max(len(a) for a in answers) + 1
    ans_ids = torch.full((len(answers), width), tokenizer.pad_token_id)  # (N, A)
    ans_mask = torch.zeros((len(answers), width), dtype=torch.long)  # (N, A)
    for i, a in enumerate(answers):
        ids = tokenizer.encode(a, add_bos=False) + [tokenizer.eos_token_id]
        ans_ids[i, : len(ids)], ans_mask[i, : len(ids)] = torch.tensor(ids), 1
    input_ids = torch.cat([enc["input_ids"], ans_ids], dim=1)  # (N, L)
    attention_mask = torch.cat([enc["attention_mask"], ans_mask], dim=1)  # (N, L)
    targets = torch.full_like(input_ids, -100)
    P = enc["input_ids"].shape[1]
    targets[:, P - 1 : -1] = torch.where(ans_mask.bool(), ans_ids, -100)  # logit at l scores token l + 1
    return input_ids, attention_mask, targets


def learning_rate(step, cfg):
    """Linear warm-up to cfg.lr, then cosine decay to 5 % of it."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_sft(cfg: SFTConfig = SFTConfig(), progress=print) -> tuple[TinyLM, CharTokenizer]:
    """A fresh seeded TinyLM fine-tuned on the addition task's examples. -> model, tokenizer."""
    torch.manual_seed(cfg.seed)
    tokenizer = CharTokenizer(AdditionTask.alphabet)
    model = TinyLM(TinyLMConfig(tokenizer.vocab_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(cfg.seed)
    model.train()
    for step in range(cfg.steps):
        input_ids, attention_mask, targets = encode_batch(tokenizer, *sft_examples(cfg.batch_size, cfg, generator))
        logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)).logits
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        if progress is not None and (step % 100 == 0 or step == cfg.steps - 1):
            progress(f"sft step {step:4d}/{cfg.steps}  loss {loss.item():.4f}")
    return model.eval(), tokenizer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=AdditionTask.checkpoint, help="checkpoint folder")
    parser.add_argument("--steps", type=int, default=SFTConfig.steps)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    torch.set_num_threads(1)  # deterministic and, for a model this small, faster
    start = time.perf_counter()
    model, tokenizer = train_sft(SFTConfig(steps=args.steps))
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"saved {args.out} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
