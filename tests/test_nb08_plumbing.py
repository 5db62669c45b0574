"""workbook/nb08_plumbing.py, the machinery of notebook 08: the probe rows are built as the catalog's probes and
tests/test_catalog.py build them, the sampler-then-trainer runner tells B12 from B13 on them, the drawing helpers
draw what they are given (and count what they say), the true-reward wrapper logs the reward of the text up to the
first EOS and changes nothing else, and the short runs are the trainers' own, computed once."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import grpo_buggy  # noqa: E402
import grpo_fixed  # noqa: E402
from tinylm import CharTokenizer, TinyLM  # noqa: E402
from workbook import catalog, nb08_plumbing  # noqa: E402
from workbook.swap import fixed_with  # noqa: E402

TOKENIZER = CharTokenizer(grpo_fixed.AdditionTask.alphabet)


@pytest.fixture(scope="module")
def sft():
    return TinyLM.from_pretrained(grpo_fixed.AdditionTask.checkpoint).eval()


def test_left_padded_puts_pad_tokens_on_the_left_and_masks_them():
    ids, mask = nb08_plumbing.left_padded(TOKENIZER, "12+3=", 3)
    alone = TOKENIZER(["12+3="])["input_ids"]
    assert ids.shape == mask.shape == (1, 3 + alone.shape[1])
    assert ids[0, :3].tolist() == [TOKENIZER.pad_token_id] * 3 and torch.equal(ids[:, 3:], alone)
    assert mask[0].tolist() == [0, 0, 0] + [1] * alone.shape[1]
    no_pad_ids, no_pad_mask = nb08_plumbing.left_padded(TOKENIZER, "12+3=", 0)
    assert torch.equal(no_pad_ids, alone) and no_pad_mask.all()


def test_left_padded_matches_the_tokenizers_own_left_padding():
    """A short prompt padded to a longer one's length by the tokenizer gets the same row."""
    batch = TOKENIZER(["1+2=", "12+34="], padding_side="left")
    ids, mask = nb08_plumbing.left_padded(TOKENIZER, "1+2=", 2)
    assert torch.equal(ids[0], batch["input_ids"][0]) and torch.equal(mask[0], batch["attention_mask"][0])


def test_sample_and_score_tells_the_wrong_side_of_b12_and_b13(sft):
    """B12 moves the trainer's log-probs with the padding, B13 the sampler's; the fixed twin neither."""
    draw = {(label, pad): nb08_plumbing.sample_and_score(module, sft, TOKENIZER, "12+3=", pad)
            for label, module in (("fixed", grpo_fixed), ("B12", catalog.hybrid("B12")), ("B13", catalog.hybrid("B13")))
            for pad in (0, 3)}
    moved = {(label, side): (getattr(draw[label, 3], side) - getattr(draw[label, 0], side)).abs().max().item()
             for label in ("fixed", "B12", "B13") for side in ("sampler_logprobs", "trainer_logprobs")}
    assert max(moved["fixed", "sampler_logprobs"], moved["fixed", "trainer_logprobs"]) < 1e-5
    assert moved["B12", "trainer_logprobs"] > 0.05 and moved["B12", "sampler_logprobs"] < 1e-5
    assert moved["B13", "sampler_logprobs"] > 0.05 and moved["B13", "trainer_logprobs"] < 1e-5
    d = draw["fixed", 3]
    assert d.completions.shape == d.mask.shape == d.sampler_logprobs.shape == (1, 4)
    assert torch.equal(d.mask, grpo_fixed.completion_mask(d.completions, TOKENIZER.eos_token_id))
    assert (d.sampler_logprobs - d.trainer_logprobs).abs()[d.mask].max() < 1e-4


def test_paired_bars_draws_each_series_at_its_labels():
    fig, ax = plt.subplots()
    bars = nb08_plumbing.paired_bars(ax, ["a", "b", "c"], {"x": [1.0, -2.0, 3.0], "y": [0.5, 0.0, -1.0]},
                                     {"x": "red"})
    assert [b.get_height() for b in bars["x"]] == [1.0, -2.0, 3.0]
    assert [b.get_height() for b in bars["y"]] == [0.5, 0.0, -1.0]
    centres = [[b.get_x() + b.get_width() / 2 for b in bars[k]] for k in ("x", "y")]
    assert all(x < y for x, y in zip(*centres, strict=True))  # side by side, x left of y
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    plt.close(fig)


def test_token_grid_shades_the_masked_in_cells_and_writes_every_token():
    fig, ax = plt.subplots()
    shaded = torch.tensor([[True, True, False], [True, False, False]])
    values = [[0.5, -0.25, 0.0], [1.0, 0.0, 0.0]]
    count = nb08_plumbing.token_grid(ax, [["2", "EOS", "4"], ["EOS", "2", "3"]], shaded, values=values, color="red")
    assert count == 3
    faces = [p.get_facecolor() for p in ax.patches]
    assert len(faces) == 6 and sum(f[:3] != (1.0, 1.0, 1.0) for f in faces) == 3
    texts = [t.get_text() for t in ax.texts]
    assert texts[:2] == ["2\n+0.50", "EOS\n-0.25"] and len(texts) == 6
    plt.close(fig)


def test_layout_strip_counts_the_groups_of_one_prompt():
    colors = {"p": "blue", "q": "orange"}
    for prompts, pure in ((["p", "p", "q", "q"], 2), (["p", "q", "p", "q"], 0), (["p", "p", "p", "q"], 1)):
        fig, ax = plt.subplots()
        assert nb08_plumbing.layout_strip(ax, prompts, [0.0] * 4, 2, colors) == pure
        assert len(ax.patches) == 4 and [t.get_text() for t in ax.texts][-2:] == ["group 0", "group 1"]
        plt.close(fig)


def test_short_runs_are_the_trainers_own_and_computed_once():
    overrides = dict(steps=2, prompts_per_batch=2, group_size=2)
    runs = nb08_plumbing.short_runs(["fixed", "B15"], seed=0, **overrides)
    assert [s["reward"] for s in runs["fixed"]] == [s["reward"] for s in grpo_fixed.train(seed=0, **overrides)]
    assert [s["mixed_groups"] for s in runs["B15"]] == [1.0, 1.0]
    assert [s["mixed_groups"] for s in runs["fixed"]] == [0.0, 0.0]
    again = nb08_plumbing.short_runs(["fixed"], seed=0, **overrides)
    assert all(a is b for a, b in zip(again["fixed"], runs["fixed"], strict=True))  # cached, not retrained
    other = nb08_plumbing.short_runs(["fixed"], seed=1, **overrides)
    assert other["fixed"][0] is not runs["fixed"][0]


def test_hybrid_vs_fixed_names_the_hybrid_on_the_left():
    fig, (ax_h, ax_f) = nb08_plumbing.hybrid_vs_fixed("B14", "title")
    assert ax_h.get_title() == 'hybrid("B14")' and ax_f.get_title() == "grpo_fixed"
    assert fig._suptitle.get_text() == "title"
    plt.close(fig)


def _same_stats(a: dict, b: dict) -> bool:
    """Equal stats dicts, NaN equal to NaN, the wall-clock 'seconds' ignored."""
    keys = (set(a) | set(b)) - {"seconds"}
    return all(a.get(k) == b.get(k) or (a.get(k) != a.get(k) and b.get(k) != b.get(k)) for k in keys)


def test_with_true_reward_logs_the_reward_of_the_text_up_to_eos_and_changes_nothing_else():
    """On B17's hybrid the logged reward scores the text past EOS and true_reward the answer, so they differ; on
    the fixed twin they are equal, exactly. The wrapper draws nothing: the rest of each run is unchanged."""
    overrides = dict(steps=2, prompts_per_batch=8)
    buggy_decode = grpo_buggy.decode_completions
    wrapped = {"fixed": fixed_with("t_fixed_true", wrap={"rollout": nb08_plumbing.with_true_reward}),
               "B17": fixed_with("t_B17_true", decode_completions=buggy_decode,
                                 wrap={"rollout": nb08_plumbing.with_true_reward})}
    plain = {"fixed": grpo_fixed, "B17": catalog.hybrid("B17")}
    runs = {label: module.train(seed=0, **overrides) for label, module in wrapped.items()}
    assert all(s["true_reward"] == s["reward"] for s in runs["fixed"])
    assert any(s["true_reward"] != s["reward"] for s in runs["B17"])
    assert runs["B17"][0]["true_reward"] == runs["fixed"][0]["reward"]  # the same first draws, scored right
    for label, history in runs.items():
        without = [{k: v for k, v in s.items() if k != "true_reward"} for s in history]
        again = plain[label].train(seed=0, **overrides)
        assert all(_same_stats(a, b) for a, b in zip(without, again, strict=True))
    assert nb08_plumbing.trainer_with_true_reward("B17").decode_completions.__code__ is buggy_decode.__code__


def test_short_runs_with_true_reward_add_the_statistic_to_the_labelled_runs_only():
    overrides = dict(steps=1, prompts_per_batch=2, group_size=2)
    runs = nb08_plumbing.short_runs(["fixed", "B17"], seed=0, true_reward=("B17",), **overrides)
    assert "true_reward" in runs["B17"][0] and "true_reward" not in runs["fixed"][0]
