"""workbook/nb05_critic.py, the machinery of notebook 05: the harness is the twin's loop (the group baseline gives
grpo_fixed.train's statistics exactly), it runs the critic's code it is given (notebook 05 §2 writes that code in
its cells; the equivalents below are checked here first: GAE with lambda = 1 is the return minus V, ...), a short
critic run trains its critic, passes are counted with forward hooks on the instances (nothing patched), and the
exact enumeration and the baseline experiment agree with cases whose answer is known."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import grpo_fixed  # noqa: E402
from workbook import catalog, nb05_critic  # noqa: E402

SHORT = dict(steps=3, prompts_per_batch=4)


# ---- the critic's code, as notebook 05 §2 writes it ---------------------------------------------------


def last_token(mask):
    """True at the last generated token of each row (the EOS, or position T-1 if truncated). (N, T)"""
    mask = mask.bool()
    after = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)  # (N, T): is t+1 generated?
    return mask & ~after


def gae_advantages(values, rewards, mask, lam: float = 1.0):
    """GAE with gamma = 1 and one outcome reward at the last token. values, mask (N, T); rewards (N,)."""
    mask = mask.bool()
    values = torch.where(mask, values, 0.0)  # (N, T)
    final = last_token(mask)  # (N, T)
    adv = torch.zeros_like(values)  # (N, T)
    next_value, next_adv = torch.zeros_like(rewards), torch.zeros_like(rewards)  # (N,)
    for t in reversed(range(values.shape[1])):
        delta = torch.where(final[:, t], rewards, 0.0) + next_value - values[:, t]  # (N,)
        adv[:, t] = torch.where(mask[:, t], delta + lam * next_adv, 0.0)
        next_value, next_adv = values[:, t], adv[:, t]
    return adv


def token_grpo_loss(logprobs, old_logprobs, token_advantages, mask, clip: float = 0.2):
    """grpo_fixed.grpo_loss with one advantage per token (each token a length-1 sequence)."""
    flat = lambda x: x.reshape(-1, 1)  # noqa: E731
    return grpo_fixed.grpo_loss(flat(logprobs), flat(old_logprobs), token_advantages.reshape(-1), flat(mask), clip)


def value_loss(values, targets, mask):
    return 0.5 * grpo_fixed.masked_mean((values - targets.detach()).pow(2), mask)


def explained_variance(values, targets, mask):
    mask = mask.bool()
    y, v = targets[mask], values[mask]
    return (1 - (y - v).var(unbiased=False) / y.var(unbiased=False).clamp(min=1e-12)).item()


CRITIC_FNS = nb05_critic.CriticFunctions(gae_advantages, token_grpo_loss, value_loss, explained_variance)


@pytest.fixture(scope="module")
def critic_run():
    return nb05_critic.train_with_baseline(baseline="critic", critic_fns=CRITIC_FNS, snapshot_at=(0, 2), **SHORT)


# ---- the harness is the twin --------------------------------------------------------------------


def test_group_baseline_reproduces_grpo_fixed_train_exactly():
    ours, _ = nb05_critic.train_with_baseline(baseline="group", **SHORT)
    theirs = grpo_fixed.train(**SHORT)
    assert len(ours) == len(theirs) == SHORT["steps"]
    for a, b in zip(ours, theirs, strict=True):
        keys = set(a) - {"seconds"}
        assert keys <= set(b) and {"reward", "loss", "kl", "grad_norm", "adv_group_mean"} <= keys
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_on_batch_sees_every_rollout_before_its_update():
    """on_batch gets each iteration's batch, in order, with the prompts the policy was trained on; the run is
    the same with or without it."""
    seen = []
    history, snapshots = nb05_critic.train_with_baseline(
        on_batch=lambda it, batch: seen.append((it, batch["prompts"], batch["rewards"].clone())), snapshot_at=(1,),
        **SHORT)
    plain, _ = nb05_critic.train_with_baseline(**SHORT)
    assert [it for it, _, _ in seen] == list(range(SHORT["steps"]))
    group = grpo_fixed.Config().group_size
    assert all(len(prompts) == SHORT["prompts_per_batch"] * group and prompts[0] == prompts[group - 1]
               for _, prompts, _ in seen)
    assert [s["reward"] for s in history] == [rewards.mean().item() for _, _, rewards in seen]
    assert [s["reward"] for s in history] == [s["reward"] for s in plain]


def test_a_hybrid_module_runs_its_own_functions():
    """module=B2 uses the hybrid's group_advantage: the SFT model answers some prompts always (or never)
    right, and on those all-equal groups its advantages turn NaN."""
    history, _ = nb05_critic.train_with_baseline(module=catalog.hybrid("B2"), steps=1, prompts_per_batch=8)
    fixed, _ = nb05_critic.train_with_baseline(steps=1, prompts_per_batch=8)
    assert history[0]["adv_nonfinite"] > 0 and fixed[0]["adv_nonfinite"] == 0


def test_unknown_baseline_is_rejected():
    with pytest.raises(ValueError, match="baseline must be one of"):
        nb05_critic.train_with_baseline(baseline="value", steps=1)


def test_the_critic_baseline_needs_the_critics_code():
    with pytest.raises(ValueError, match="critic_fns"):
        nb05_critic.train_with_baseline(baseline="critic", steps=1)


def test_the_harness_runs_the_code_it_is_given():
    """A value loss that counts its calls: one critic step per minibatch calls it, nothing else does."""
    calls = []

    def counting_value_loss(values, targets, mask):
        calls.append(values.shape)
        return value_loss(values, targets, mask)

    fns = CRITIC_FNS._replace(value_loss=counting_value_loss)
    cfg = grpo_fixed.make_config(**SHORT)
    nb05_critic.train_with_baseline(baseline="critic", critic_fns=fns, **{**SHORT, "steps": 1})
    assert len(calls) == cfg.inner_epochs * cfg.minibatches


# ---- GAE ------------------------------------------------------------------------------------------


def random_episodes(n=6, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (n,), generator=g)  # (n,)
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (n, T)
    values = torch.randn(n, T, generator=g)  # (n, T), garbage after the episode ends
    rewards = torch.rand(n, generator=g)  # (n,)
    return values, rewards, mask


def test_gae_with_lambda_one_is_the_return_minus_v():
    values, rewards, mask = random_episodes()
    adv = gae_advantages(values, rewards, mask, lam=1.0)  # (n, T)
    assert torch.allclose(adv, torch.where(mask, rewards[:, None] - values, 0.0), atol=1e-6)


def test_gae_with_lambda_zero_is_the_one_step_td_error():
    values, rewards, mask = random_episodes(seed=1)
    adv = gae_advantages(values, rewards, mask, lam=0.0)
    last = last_token(mask)
    next_v = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1) * torch.cat(
        [mask[:, 1:], torch.zeros_like(mask[:, :1])], 1)
    td = torch.where(last, rewards[:, None], 0.0) + next_v - values
    assert torch.allclose(adv, torch.where(mask, td, 0.0), atol=1e-6)


def test_gae_hand_example():
    values = torch.tensor([[0.5, 0.6, 0.8, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    half = gae_advantages(values, torch.tensor([1.0]), mask, lam=0.5)
    assert torch.allclose(half, torch.tensor([[0.25, 0.3, 0.2, 0.0]]))  # delta = .1, .2, .2; A = delta + A'/2


def test_the_critic_targets_are_the_outcome_with_lambda_one():
    """On a real rollout: with lambda = 1 every generated token's return is the outcome reward r, so the
    advantage before scaling, returns - V_phi_old, is r - V(s_t)."""
    task, cfg = grpo_fixed.AdditionTask(), grpo_fixed.make_config(prompts_per_batch=4)
    policy, ref_policy, tokenizer, _, generator = grpo_fixed.setup_run(task, cfg, seed=0)
    batch, _ = grpo_fixed.rollout(policy, ref_policy, tokenizer, task, cfg, generator)
    critic = nb05_critic.make_critic(task)
    with torch.no_grad():
        critic.head.bias.fill_(0.3)  # a non-zero critic, so r - V differs from r
        critic.head.weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(0))
    stats = nb05_critic.attach_advantages(batch, "critic", critic, cfg, lam=1.0, fns=CRITIC_FNS)
    mask, r = batch["mask"], batch["rewards"][:, None].expand_as(batch["mask"])
    assert torch.allclose(batch["returns"][mask], r[mask], atol=1e-6)
    scale = (batch["returns"] - batch["values"])[mask].std(unbiased=False) + cfg.adv_eps
    assert torch.allclose(batch["token_advantages"] * scale, torch.where(mask, r - batch["values"], 0.0), atol=1e-5)
    assert -1.0 <= stats["explained_variance"] <= 1.0 and stats["value_error"] >= 0


def test_token_loss_equals_grpo_loss_for_constant_rows():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 4, generator=g)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([0.7, -1.2, 0.3])
    token = token_grpo_loss(logp, logp - 0.3, adv[:, None].expand(3, 4), mask)
    assert torch.equal(token, grpo_fixed.grpo_loss(logp, logp - 0.3, adv, mask))


# ---- a short critic run ---------------------------------------------------------------------------


def test_short_critic_run_logs_value_stats_and_trains_the_critic(critic_run):
    history, snapshots = critic_run
    assert [s["iteration"] for s in history] == [0, 1, 2]
    for s in history:
        assert all(math.isfinite(s[k]) for k in ("reward", "loss", "kl", "value_error", "explained_variance"))
    (p0, c0), (p2, c2) = snapshots[0], snapshots[2]
    moved = lambda a, b: any(not torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))  # noqa: E731
    assert moved(c0, c2) and moved(p0, p2)  # both networks were updated
    assert c0.head.out_features == 1 and not c0.training


def test_snapshots_are_copies_taken_before_the_iteration(critic_run):
    _, snapshots = critic_run
    fresh_policy = grpo_fixed.setup_run(grpo_fixed.AdditionTask(), grpo_fixed.make_config(), seed=0)[0]
    for a, b in zip(snapshots[0][0].parameters(), fresh_policy.parameters(), strict=True):
        assert torch.equal(a, b)  # iteration 0's snapshot is the initial policy


# ---- cost accounting: hooks on instances ----------------------------------------------------------


def test_count_passes_counts_every_network_and_patches_nothing():
    forward = grpo_fixed.TinyLM.forward
    cfg = grpo_fixed.make_config(**SHORT)
    N, steps = cfg.prompts_per_batch * cfg.group_size, cfg.inner_epochs * cfg.minibatches
    group = nb05_critic.count_passes(baseline="group", **SHORT)
    critic = nb05_critic.count_passes(baseline="critic", critic_fns=CRITIC_FNS, **SHORT)
    assert grpo_fixed.TinyLM.forward is forward  # the class is untouched
    assert group[("reference", "forward")] == (1, N)
    assert group[("policy", "forward+backward")] == (steps, cfg.inner_epochs * N)
    calls, rows = group[("policy", "forward")]
    assert rows == calls * N
    assert 3 <= calls <= grpo_fixed.AdditionTask.max_completion_length + 2  # prompt + each token + old log-probs
    assert {k: v for k, v in critic.items() if k not in group} == {
        ("critic", "forward"): (1, N), ("critic", "forward+backward"): (steps, cfg.inner_epochs * N)}


def test_count_passes_removes_its_hooks():
    seen = {}
    original = nb05_critic.train_with_baseline

    def spy(*args, on_setup=None, **kwargs):
        def keep(networks):
            seen.update(networks)
            on_setup(networks)
        return original(*args, on_setup=keep, **kwargs)

    nb05_critic.train_with_baseline = spy
    try:
        nb05_critic.count_passes(baseline="critic", critic_fns=CRITIC_FNS, **SHORT)
    finally:
        nb05_critic.train_with_baseline = original
    assert set(seen) == {"policy", "reference", "critic"}
    assert all(not net._forward_hooks for net in seen.values())


# ---- exact enumeration and the baseline experiment -------------------------------------------------


def test_exact_values_are_the_probability_of_the_one_right_answer():
    task = grpo_fixed.AdditionTask()
    prompts = nb05_critic.all_prompts(task)
    assert len(prompts) == 2500 == len(set(prompts)) and prompts[0] == "0+0=" and prompts[-1] == "49+49="
    assert nb05_critic.answer("17+25=") == "42"
    policy, _, tokenizer, _, _ = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)
    few = ["3+4=", "17+25=", "49+49="]
    probs, rewards = nb05_critic.exact_outcomes(policy, tokenizer, few, 0.8)
    assert probs.shape == rewards.shape == (3, 2) and torch.allclose(probs.sum(1), torch.ones(3, dtype=probs.dtype))
    assert rewards[:, 1].eq(1).all() and rewards[:, 0].eq(0).all()
    logp, mask = nb05_critic.answer_logprobs(policy, tokenizer, few, 0.8)
    assert mask.sum(1).tolist() == [2, 3, 3]  # digits + EOS
    # the same number by scoring the answer's tokens one at a time with the twin's own generate-side softmax
    enc = tokenizer(["17+25="], padding_side="left")
    ids = enc["input_ids"]
    manual = 0.0
    for tok in tokenizer.encode("42", add_bos=False) + [tokenizer.eos_token_id]:
        with torch.no_grad():
            logits = policy(ids).logits[0, -1] / 0.8
        manual += torch.log_softmax(logits, -1)[tok].item()
        ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
    assert probs[1, 1].item() == pytest.approx(math.exp(manual), rel=1e-4)
    # sampled frequency agrees with the exact value (a prompt the SFT model gets right sometimes)
    g = torch.Generator().manual_seed(0)
    enc = tokenizer(["17+25="] * 2000, padding_side="left")
    completions, mask, _, _ = grpo_fixed.generate(policy, tokenizer, enc["input_ids"], enc["attention_mask"], 5, 0.8, g)
    hits = sum(t == "42" for t in grpo_fixed.decode_completions(tokenizer, completions, mask)) / 2000
    assert hits == pytest.approx(probs[1, 1].item(), abs=0.05)


def _last_step_probs(policy, tokenizer, prompt, prefix, temperature):
    """softmax(logits / T) of the next token after prompt + prefix, one unpadded forward. (V,)"""
    ids = torch.cat([tokenizer([prompt])["input_ids"], torch.tensor([prefix], dtype=torch.long).view(1, -1)], dim=1)
    with torch.no_grad():
        return torch.softmax(policy(ids).logits[0, -1].double() / temperature, -1)


def test_special_token_bound_sums_the_special_mass_along_the_answers_path():
    task = grpo_fixed.AdditionTask()
    policy, _, tokenizer, _, _ = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)
    few = ["3+4=", "17+25=", "49+49="]
    bound = nb05_critic.special_token_bound(policy, tokenizer, few, 0.8)
    for i, prompt in enumerate(few):
        answer = tokenizer.encode(nb05_critic.answer(prompt), add_bos=False) + [tokenizer.eos_token_id]
        manual, on_path = 0.0, 1.0
        for t, tok in enumerate(answer):
            p = _last_step_probs(policy, tokenizer, prompt, answer[:t], 0.8)
            manual += on_path * (p[tokenizer.pad_token_id] + p[tokenizer.bos_token_id]).item()
            on_path *= p[tok].item()
        assert bound[i].item() == pytest.approx(manual, rel=1e-4, abs=1e-12)
    assert (bound >= 0).all() and (bound < 1).all()


def test_exact_state_values_follow_the_answer_and_drop_to_zero_after_a_wrong_token():
    task = grpo_fixed.AdditionTask()
    policy, _, tokenizer, _, _ = grpo_fixed.setup_run(task, grpo_fixed.make_config(), seed=0)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    digit = lambda text: tokenizer.encode(text, add_bos=False)  # noqa: E731
    prompts = ["17+25=", "17+25=", "3+4=", "3+4="]
    completions = torch.tensor([digit("42") + [eos, pad, pad],  # right
                                digit("43") + [eos, pad, pad],  # second digit wrong
                                digit("8") + [eos, pad, pad, pad],  # first digit wrong
                                digit("7") + [pad, eos, pad, pad]])  # a PAD inside: counted as wrong
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    values = nb05_critic.exact_state_values(policy, tokenizer, prompts, completions, mask, 0.8)  # (4, 5)
    probs, _ = nb05_critic.exact_outcomes(policy, tokenizer, prompts, 0.8)
    assert torch.allclose(values[:, 0], probs[:, 1], atol=1e-7)  # V(s_0) = V(x)
    p4 = _last_step_probs(policy, tokenizer, "17+25=", digit("4"), 0.8)
    p42 = _last_step_probs(policy, tokenizer, "17+25=", digit("42"), 0.8)
    assert values[0, 1].item() == pytest.approx((p4[digit("2")[0]] * p42[eos]).item(), rel=1e-4)
    assert values[0, 2].item() == pytest.approx(p42[eos].item(), rel=1e-4)
    assert values[1, 1] == values[0, 1] and values[1, 2] == 0  # "4" is right, "43" is not
    assert values[2, 1] == 0 and values[3, 2] == 0 and values[3, 1] > 0  # wrong digit; PAD after the right "7"
    assert (values[~mask] == 0).all()


def test_critic_prompt_values_start_at_zero_and_follow_the_head():
    task = grpo_fixed.AdditionTask()
    critic, tokenizer = nb05_critic.make_critic(task), grpo_fixed.CharTokenizer(task.alphabet)
    assert nb05_critic.critic_prompt_values(critic, tokenizer, ["3+4=", "17+25="]).tolist() == [0.0, 0.0]
    with torch.no_grad():
        critic.head.bias.fill_(0.25)
    assert nb05_critic.critic_prompt_values(critic, tokenizer, ["3+4=", "17+25="]).tolist() == [0.25, 0.25]


def test_baseline_experiment_on_deterministic_prompts():
    """Every prompt always gets the same reward (sigma = 0): the group mean is exact, no baseline errs by V^2."""
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])  # (n, K)
    probs = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])  # prompt 0 always 1, prompt 1 always 1, prompt 2 0.5
    value = (probs * rewards).sum(1)  # (n,) = 1, 1, 0.5
    group = lambda r, G, slots: r.unflatten(-1, (-1, G)).mean(-1, keepdim=True).expand(*r.shape[:-1], -1, G).flatten(-2)  # noqa: E731
    none = lambda r, G, s: torch.zeros_like(r)  # noqa: E731
    out = nb05_critic.baseline_experiment(probs, rewards, [2, 4], {"group": group, "none": none},
                                          no_reset={"no reset": group}, B=4, repeats=50)
    for G in (2, 4):
        assert out[G]["group"]["mse"] < 1e-12 and out[G]["group"]["bias2"] < 1e-12
        assert out[G]["none"]["mse"] == pytest.approx(value.pow(2).mean().item(), rel=0.15)
        assert out[G]["no reset"]["mse"] > 0.01  # other prompts' values leak in


def test_per_prompt_figure_shows_the_stats():
    value = torch.tensor([0.4, 0.6, 0.8])
    fig = nb05_critic.PerPromptFigure(value, value - 0.1, B=16)
    stats = dict(mean_b=torch.tensor([0.5, 0.6, 0.7]), std_b=torch.tensor([0.1, 0.0, 0.2]), mse=0.0123, bias2=0.0045)
    fig.update(4, stats, stats)
    points, bars, label = fig.panels["B9"]
    assert points.get_ydata().tolist() == pytest.approx([0.5, 0.6, 0.7])
    assert [seg[:, 1].tolist() for seg in bars.get_segments()][2] == pytest.approx([0.5, 0.9])
    assert label.get_text() == "G = 4: MSE 0.0123, bias^2 0.0045"
    plt.close(fig.fig)
