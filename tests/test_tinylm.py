"""The tiny language model and its tokenizer behave like a model library's: left padding with an attention
mask and explicit position ids leaves a row's logits unchanged, default position ids do not, padded keys get
exactly zero weight in the hand-written masked softmax, the key-value cache reproduces the full forward pass, the
model is causal, a checkpoint round-trips, and from_pretrained overrides dropout and nothing else."""

from __future__ import annotations

import pytest
import torch

from tinylm import CharTokenizer, TinyLM, TinyLMConfig, attention_allowed

ALPHABET = "0123456789+="


@pytest.fixture
def tokenizer():
    return CharTokenizer(ALPHABET)


@pytest.fixture
def model(tokenizer):
    torch.manual_seed(0)
    return TinyLM(TinyLMConfig(tokenizer.vocab_size)).eval()


def positions(mask):
    return (mask.cumsum(-1) - 1).clamp(min=0)


def test_left_padding_and_the_attention_mask(tokenizer):
    batch = tokenizer(["12+7=", "3+4="], padding_side="left")
    assert batch["input_ids"].tolist() == [[1, 4, 5, 13, 10, 14], [0, 1, 6, 13, 7, 14]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]]
    right = tokenizer(["12+7=", "3+4="], padding_side="right")
    assert right["input_ids"][1].tolist() == [1, 6, 13, 7, 14, 0]


def test_decode_skips_special_tokens_only_when_asked(tokenizer):
    ids = torch.tensor([[1, 4, 5, 2, 0], [1, 6, 0, 0, 0]])
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == ["12", "3"]
    assert tokenizer.decode(ids[0]) == "<bos>12<eos><pad>"


@pytest.mark.parametrize("call", [
    lambda t: t.encode("12a"), lambda t: t(["1"], padding_side="middle"), lambda t: t("12"),
    lambda t: t.decode([99]), lambda t: CharTokenizer("aa"),
])
def test_bad_input_is_a_value_error(tokenizer, call):
    with pytest.raises(ValueError):
        call(tokenizer)


def test_left_padding_changes_nothing_with_mask_and_positions(tokenizer, model):
    batch = tokenizer(["55+66=", "3+4="])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    padded = model(ids, attention_mask=mask, position_ids=positions(mask)).logits[1, 2:]  # (4, V)
    alone = model(tokenizer(["3+4="])["input_ids"]).logits[0]
    torch.testing.assert_close(padded, alone, rtol=0, atol=1e-5)


def test_default_positions_shift_a_left_padded_row(tokenizer, model):
    """As in Hugging Face models: position ids default to 0..L-1, so a padded row needs its own."""
    batch = tokenizer(["55+66=", "3+4="])
    shifted = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits[1, 2:]
    alone = model(tokenizer(["3+4="])["input_ids"]).logits[0]
    assert (shifted - alone).abs().max() > 1e-3


def test_the_cache_reproduces_the_full_forward(tokenizer, model):
    batch = tokenizer(["12+7=", "3+4=", "55+66="])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    pos = positions(mask)
    full = model(ids, attention_mask=mask, position_ids=pos).logits
    head = model(ids[:, :4], attention_mask=mask[:, :4], position_ids=pos[:, :4], use_cache=True)
    tail = model(ids[:, 4:], attention_mask=mask, position_ids=pos[:, 4:], past_key_values=head.past_key_values)
    both = torch.cat([head.logits, tail.logits], dim=1)
    torch.testing.assert_close(both[mask.bool()], full[mask.bool()], rtol=0, atol=1e-5)


def test_causal_the_future_does_not_leak(tokenizer, model):
    a = model(tokenizer(["12+7="])["input_ids"]).logits[0, :3]
    b = model(tokenizer(["12+9="])["input_ids"]).logits[0, :3]
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_fully_padded_query_row_stays_finite():
    allowed = attention_allowed(torch.tensor([[False, False, True]]), 3)
    assert allowed[0, 0].tolist() == [[True, False, False], [False, True, False], [False, False, True]]


def test_positions_beyond_the_table_are_refused(tokenizer, model):
    ids = torch.ones(1, model.config.max_positions + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="position ids"):
        model(ids)


def test_checkpoint_round_trip(tmp_path, tokenizer, model):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    again, tok = TinyLM.from_pretrained(tmp_path).eval(), CharTokenizer.from_pretrained(tmp_path)
    ids = tok(["9+9="])["input_ids"]
    torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_padded_keys_get_exactly_zero_attention(tokenizer, model):
    """The hand-written masked softmax: whatever token sits on a padded position, the real tokens' logits are
    bit-for-bit the same (its attention weight is exactly 0)."""
    batch = tokenizer(["55+66=", "3+4="])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    junk = ids.clone()
    junk[1, :2] = torch.tensor([7, 13])  # "4+" where row 1 has its two PADs
    pos = positions(mask)
    a = model(ids, attention_mask=mask, position_ids=pos).logits[1, 2:]
    b = model(junk, attention_mask=mask, position_ids=pos).logits[1, 2:]
    assert torch.equal(a, b)
    unmasked = model(junk, attention_mask=torch.ones_like(mask), position_ids=pos).logits[1, 2:]
    assert (unmasked - a).abs().max() > 1e-4, "without the mask the junk tokens must be seen: the check can fail"


def test_from_pretrained_overrides_dropout_only(tmp_path, tokenizer, model):
    model.save_pretrained(tmp_path)
    loaded = TinyLM.from_pretrained(tmp_path, dropout=0.3)
    assert loaded.config.dropout == 0.3 and model.config.dropout == 0.0
    assert loaded.config == TinyLMConfig(**{**model.config.__dict__, "dropout": 0.3})
    for (name, p), q in zip(loaded.named_parameters(), model.parameters(), strict=True):
        assert torch.equal(p, q), name
    ids = tokenizer(["12+7="])["input_ids"]
    torch.testing.assert_close(loaded.eval()(ids).logits, model(ids).logits, rtol=0, atol=0)
    torch.manual_seed(0)
    assert not torch.equal(loaded.train()(ids).logits, model(ids).logits), "dropout 0.3 is active in train mode"
    for bad in ({"d_model": 32}, {"vocab_size": 15}, {"dropout": 0.1, "n_layers": 3}):
        with pytest.raises(ValueError, match="only dropout"):
            TinyLM.from_pretrained(tmp_path, **bad)
