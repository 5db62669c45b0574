# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 — Start here: practising the round
#
# **The round.** You are handed a small GRPO trainer in PyTorch that runs without an exception and learns
# poorly. It is an LM RL loop in miniature: a tiny causal language model (`tinylm.py`, loaded like a model
# library's) starts from a supervised fine-tuned checkpoint for prompts "a+b=", and GRPO trains it on text
# rewards: prompts of different lengths left-padded with an attention mask and position ids, completions
# generated token by token with a key-value cache, decoded, and scored 1 when the text is the sum.
# You find its silent bugs with tiny inputs and fix them without changing a public signature; you may be
# asked to write the spec's functions yourself; and the last 15 minutes are a discussion of the RL
# math behind the code you just fixed (ratio clipping, advantage normalisation, on- vs off-policy updates,
# KL vs clipping, group baseline vs critic).
#
# This workbook rehearses each part with a command, a grader and the notebooks that back the answers:
#
# 1. **Debug** a hand-out with bugs left in, against the clock: `make mock [BUGS=k]`, fix
#    `practice/round_N.py` in place, `make grade`, `make hint [LEVEL=1|2|3] [N=k]`. Behind it: notebook 01 (the
#    method, then bugs B1-B11 on tiny inputs), notebook 08 (the LM-plumbing bugs B12-B17: position ids,
#    attention mask, EOS, prompt layout, reference, decoding) and notebook 03 (the assertions and logging that
#    catch them).
# 2. **From scratch**: write the spec's three public functions (or other functions of the trainer) from
#    their docstrings: `make scratch [FUNCS=...|all]`, edit `practice/scratch_N.py`,
#    `make grade FILE=practice/scratch_N.py`. Behind it: the spec, `SPEC.md`, one graded line per sentence (S15, the
#    signatures, is checked when the file loads).
# 3. **Discussion**: answer aloud, then compare with a model answer and the notebook section that backs it:
#    `make drill`, `make drill REPORT=1`, or the card below. Behind it: notebooks 02, 04 and 05 (follow-ups
#    2, 4 and 5 of SPEC.md), 06 (the GRPO variants of TRL and verl) and 07 (off-policy data in practice).
#
# `make interview` chains parts 1 and 3 as SPEC.md describes the round: a 3-bug round under a 45-minute
# countdown (`make grade` and `make hint` show the minutes left), then about 15 minutes of questions (the
# timer is checked after each card, so the last one may run over), first on the round's bugs, fixed or not,
# then a short write-up. `make progress` (and notebook 00 §4 below) shows what you practised.
#
# `practice/` is git-ignored: your rounds, scratch files and the practice log stay on your machine.
# Suggested order: read `grpo_buggy.py` and run it; do a mock round (part 1); write the functions from
# scratch (part 2); drill the discussion (part 3) until every topic's mean score is close to 2; then
# `make interview`. This notebook demonstrates parts 2 and 3 on throw-away files; nothing here writes to
# `practice/` (notebook 00 §4 only reads its log).

# %%
import logging
import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display

import grpo_buggy
import grpo_fixed
import workbook  # noqa: F401  (one torch thread)
from interview import (
    drill,
    drill_card,
    grading,
    history,
    rounds,
    sandbox,
    scratch,
    scratch_grader,
    spec_cases,
    splice,
    verdicts,
)
from interview.panel import PracticePanel
from workbook.plots import BUGGY, FIXED, buggy_vs_fixed

logging.getLogger("grpo").setLevel(logging.ERROR)  # the hand-out logs health warnings; the figure shows its reward
work = Path(tempfile.mkdtemp(prefix="practice_demo_"))  # a throw-away practice folder for this notebook

# %%
SHORT_RUN = dict(seed=0, steps=grading.TRAIN_STEPS, **grading.TRAIN_OVERRIDES)  # the grader's short run (§1)
glance = {module.__name__: [s["reward"] for s in module.train(**SHORT_RUN)] for module in (grpo_buggy, grpo_fixed)}
fig, axes = buggy_vs_fixed("reward per iteration of the grader's short run, seed 0", figsize=(8, 2.4))
for ax, rewards, color in zip(axes, glance.values(), (BUGGY, FIXED), strict=True):
    ax.plot(range(len(rewards)), rewards, "o-", color=color)
    ax.set_xlabel("iteration")
axes[0].set(ylabel="reward", ylim=(-0.05, 1.05))
plt.show()
fixed_range = f"{min(glance['grpo_fixed']):.3f} to {max(glance['grpo_fixed']):.3f}"
print(f"grpo_buggy: at most {max(glance['grpo_buggy']):.3f};  grpo_fixed: {fixed_range}")
assert max(glance["grpo_buggy"]) == 0.0 and fixed_range == "0.225 to 0.463"  # as quoted

# %% [markdown]
# **At a glance.** The hand-out `grpo_buggy.py` (left) logs a reward of 0 at every iteration of the grader's short
# run, the first included, before any update, so something upstream of the loss (the rollout or the reward) is
# already wrong. Its fixed twin (right) scores 0.225 to 0.463 with no upward trend: §1 explains why eight iterations
# cannot show learning, and what `make grade` checks instead.

# %% [markdown]
# ## 1. Debug a hand-out
#
# `make mock` draws a round: `practice/round_N.py` is `grpo_buggy.py` with k of its bugs left in (3 by
# default, as SPEC.md describes the round) and the others fixed; its header says which round it is, never
# which bugs. Run it, read the logs, find the bugs with tiny inputs (notebook 01 §1 is the method), fix
# them in place. `make grade` counts the bugs fixed and names only those, and counts the edits that broke a
# function that worked (`REVEAL=1` names the rest); `make hint` gives a hint for one remaining bug (`N=2` the
# next one), from the symptom (level 1) to the fix (level 3). Each bug lives in one function and is graded there:
# a fix written in another function (say, a softmax added by the caller of the sampler) leaves it "remaining". A
# round is meant to take 45 minutes.
#
# **From this notebook.** The panel below does what those make targets do, with the same code (`interview/cli.py`):
# *Draw a round* writes `practice/round_N.py` and links to it (the link opens it in JupyterLab's editor);
# *Grade* and *Hint* act on that round, or on the newest one. To run the round file, open a Terminal
# (File > New > Terminal) and type the command the panel shows after a draw: it starts with `cd` to the repository,
# because a Terminal may open in another folder.
# Nothing is written until you press a button: running this notebook leaves `practice/` as it was.

# %% tags=["nbval-ignore-output"]
panel = PracticePanel()
display(panel.widget)

# %% [markdown]
# A round file imports what the twins import, `grpo_support` (statistics, validation, the command line) and
# `tinylm` (the model and the tokenizer), and starts from the SFT checkpoint `checkpoints/addition_sft`,
# whose path `grpo_support.CHECKPOINTS` resolves next to `grpo_support.py`, not next to the round: run from
# `practice/` (or graded from a temporary copy) it finds the same checkpoint (`make sft` rebuilds it). Here is
# a 3-bug round's imports and its task, written into the throw-away folder:

# %%
round_text = rounds.round_source(1, 3, datetime(2026, 1, 1, tzinfo=UTC))
(work / "round_1.py").write_text(round_text)
imports = [line.split()[1] for line in round_text.splitlines() if line.startswith(("import ", "from "))]
print(round_text.splitlines()[0])
print("imports:", ", ".join(imports))
demo = sandbox.load_module("practice_demo_round", round_text, str(work / "round_1.py"))
print("checkpoint:", demo.AdditionTask.checkpoint.relative_to(rounds.ROOT), "exists:",
      (demo.AdditionTask.checkpoint / "model.pt").is_file())
assert {"torch", "grpo_support", "tinylm"} <= set(imports)
assert (demo.AdditionTask.checkpoint / "model.pt").is_file()

# %% [markdown]
# `make grade` judges each edited function inside the fixed twin: a bug counts as fixed when that function
# passes every spec test and every catalog test there, and a short training run with it stays in the fixed
# twin's band. The short run is small, so that a grade takes seconds; the band only guards against a fix
# that wrecks training (`interview/verdicts.py` says how the band was measured, over seeds and bugs):

# %%
B, G = grading.TRAIN_OVERRIDES["prompts_per_batch"], grading.TRAIN_OVERRIDES["group_size"]
print(f"short run: {grading.TRAIN_STEPS} iterations of B = {B} prompts x G = {G} samples, seed 0; its reward is "
      f"the mean of the last {verdicts.BAND_LAST}, and a fix may end at most {verdicts.BAND_TOLERANCE} below "
      f"the fixed twin's own short run")
assert (grading.TRAIN_STEPS, B, G, verdicts.BAND_LAST, verdicts.BAND_TOLERANCE) == (8, 10, 8, 4, 0.15)

# %% [markdown]
# The fixed twin's own short run, as `make grade` runs it for the band (about a second; the figure at the top ran it):

# %%
short = glance["grpo_fixed"]  # grpo_fixed.train(seed=0, steps=grading.TRAIN_STEPS, **grading.TRAIN_OVERRIDES)
band_reward = sum(short[-verdicts.BAND_LAST:]) / verdicts.BAND_LAST
print("reward per iteration:", " ".join(f"{r:.3f}" for r in short))
print(f"first iteration (the SFT model's samples) {short[0]:.3f}; band reward (mean of the last "
      f"{verdicts.BAND_LAST}) {band_reward:.3f}; floor for a fix {band_reward - verdicts.BAND_TOLERANCE:.3f}")
assert band_reward < short[0] and max(short) - min(short) > 0.2  # no rise above the iteration-to-iteration noise

# %% [markdown]
# On seed 0, the seed the grader runs, the reward does not rise: 0.387 at the first iteration, 0.306 over
# the last 4, while single iterations of 80 samples range from 0.225 to 0.463. Eight iterations are too few
# for the reward to climb out of that noise (other seeds end higher; `interview/verdicts.py` records the
# spread it measured), so the band only catches a fix that wrecks training, and most bugs are told apart
# by the tests, not by the reward.

# %% [markdown]
# ## 2. Write it from scratch
#
# `make scratch` writes `practice/scratch_N.py`: the same hand-out with no bug left in, where the three
# public functions of the spec (`sample_from_logits`, `group_advantage`, `grpo_loss`) are replaced by stubs
# that keep their signature and their docstring, now followed by the sentences of `SPEC.md` they are graded on.
# `FUNCS=masked_mean,kl_to_reference` stubs other functions of the trainer instead (`FUNCS=all`: every
# function the bug catalog touches). Here is one stub, from a scratch file written into the throw-away folder:

# %%
path = scratch.new_scratch(out_dir=work)
stub = splice.function_nodes(path.read_text())["grpo_loss"]
lines = path.read_text().splitlines()[stub.lineno - 1 : stub.end_lineno]
spec_part = lines[lines.index("    " + scratch.SPEC_LINE) : -1]
print(path.name)
print("\n".join([lines[0], "    ...", *spec_part, lines[-1].split("(")[0] + '("grpo_loss: write it, then ...")']))
assert scratch.is_stub(stub)

# %% [markdown]
# `make grade FILE=practice/scratch_N.py` grades it one spec sentence at a time: `pass` or `fail`, and
# for a failure the smallest input that shows it, with your value beside the expected one. A stub still
# raising `NotImplementedError` is "not written yet". Each sentence is checked with only the functions it
# is about taken from your file (the rest is the fixed twin), so one mistake fails only the sentences it
# breaks. Once nothing is left to write, your functions also train the default run, and the final reward
# is printed beside the fixed twin's.
#
# Say we write `group_advantage` and make the classic slip of the *sample* standard deviation (divide by
# G − 1), where the spec (SPEC.md, sentence S4 population-std) asks for the population one (divide by G).
# The other two functions are still stubs:

# %%
MY_GROUP_ADVANTAGE = '''
def group_advantage(rewards, eps: float = 1e-8):
    r = check_rewards(rewards, eps)  # the hand-out's validation: a nonempty list of finite reals, eps > 0
    if bool((r == r[0]).all()):  # a constant group carries no signal
        return torch.zeros_like(r)
    scale = r.abs().max()
    r = r / scale  # |r| <= 1: the mean and the variance cannot overflow
    centered = r - r.mean()
    std = centered.pow(2).sum().div(len(r) - 1).sqrt()  # sample std: divides by G - 1
    return centered / (std + eps / scale)
'''
path.write_text(scratch.splice(path.read_text(), {"group_advantage": MY_GROUP_ADVANTAGE.strip() + "\n"}))
code = scratch_grader.grade(path, train=False)
print("exit code", code)
outcomes = scratch_grader.grade_outcomes(path)
assert code == 1
assert {o.key for o in outcomes if not o.ok and not o.not_written} == {"population-std"}
assert {o.key for o in outcomes if o.not_written} == {s.key for s in spec_cases.graded_sentences()
                                                     if set(s.funcs) & {"sample_from_logits", "grpo_loss"}}

# %% [markdown]
# One sentence fails, on the smallest group that shows it: for rewards [0, 1] the population std is 0.5
# and the advantages are ±1; dividing by G − 1 gives a std of 0.7071 and advantages of ±0.7071. The
# sentences about eps, overflow and constant groups still pass, because that one line breaks none of them.
# The sentences of the two stubs say "not written yet", and there is no training run until they are written.
# Exit codes are the mock grader's: 0 when every line passes, 1 otherwise, 2 when the file cannot be graded
# (missing, a syntax error, an import error, a renamed function or a changed signature: one line says which).

# %% [markdown]
# ## 3. The discussion drill
#
# `make drill` asks one question at a time. Say the one-line answer first (about 15 s) and press Enter,
# then the full answer (about 90 s in all, the pace of the interview's last 15 minutes) and press Enter:
# each Enter prints the seconds so far, with a warning past its budget. Then you see the model answer and
# the notebook section whose output backs it, and score yourself: 0 (did not know it), 1 (partly),
# 2 (knew it). Every answer, with its seconds, is appended to the practice log `practice/history.jsonl`;
# `make drill REPORT=1` shows your scores per topic, `TOPIC=...` drills one topic, `WEAKEST=1` your weakest
# cards first.
#
# The schedule: cards you have never answered come first, until you have seen the whole bank once. Each
# card sits in a box from 0 to 4: a 2 moves it up one box, a 1 down one, a 0 back to box 0, and a card in
# box k is due again 2^(k−1) days after its last answer (box 0 at once). After the new cards come the due
# ones, lowest box first; when nothing is due the drill says you are done for today. A card you could not
# answer comes back in the same session, after 3 to 5 other cards. A card whose model answer is corrected
# starts again from box 0 (answers are kept under a hash of the answer text). The bank
# (`interview/questions.toml`) comes from follow-ups 2 to 5 and the discussion topics of `SPEC.md`, and
# from the notebooks:

# %%
bank = drill.load_bank()
for topic in drill.TOPICS:
    qs = [q for q in bank if q.topic == topic]
    print(f"{topic:<26} {len(qs):2d} questions, backed by notebooks {sorted({q.notebook for q in qs})}")
print(f"{'total':<26} {len(bank):2d}")
assert len(bank) >= 30 and set(drill.TOPICS) == {q.topic for q in bank}
assert [drill.interval(b).days for b in range(drill.MAX_BOX + 1)] == [0, 1, 2, 4, 8]

# %% [markdown]
# The same drill as a card: **Next** draws a question and starts a timer that ticks in the browser (a bar that
# fills over the 90 s budget, the seconds beside it: the one-liner by 15 s, the full answer by 90 s), **Reveal**
# stops it and shows the model answer (the one-liner, the rest, two follow-ups to answer aloud), the seconds
# since the question appeared, and the section that backs it as a link that opens that notebook at that
# section; the score buttons record your score (with those seconds) and draw the next question. Scores are appended to
# `practice/history.jsonl`, the terminal drill's log (both only append, so neither loses the other's answers;
# nothing is written until you score a card, beyond a one-time copy of an older `practice/drill_scores.json`);
# set `SAVE_SCORES = False` to keep them in memory only.

# %% tags=["nbval-ignore-output"]
SAVE_SCORES = True
if SAVE_SCORES:
    store = drill.ScoreStore(drill.SCORES_PATH, bank, legacy=drill.LEGACY_SCORES_PATH)
else:
    store = drill.ScoreStore(None, bank)
card = drill_card.DrillCard(bank, store, random.Random())
display(card.widget)

# %% [markdown]
# The card's buttons, clicked from Python on a card of its own (seeded draw, scores in memory), printing
# what the card shows after each click:

# %%
class FakeClock:
    """Seconds that advance 20 per call, so the printed times do not depend on this machine."""

    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 20
        return self.t


check = drill_card.DrillCard(bank, drill.ScoreStore(None, bank), random.Random(0), clock=FakeClock())


def shows(card):
    """The card's text, with the cited section as `notebook NN §K` (titles belong to the other notebooks)."""
    q = card.current
    lines = card.text().splitlines()
    backed = [i for i, line in enumerate(lines) if line.startswith("Backed by")]
    for i in backed:
        assert lines[i].startswith(f"Backed by {q.ref}")
        lines[i] = f"Backed by {q.ref}."
    return "\n".join(lines)


check.next_button.click()
first = check.current
print("after Next:\n" + shows(check), end="\n\n")
check.score_buttons[0].click()  # ignored: nothing is revealed yet
assert check.current is first and check.store.history(first.id) == []
check.reveal_button.click()
print("after Reveal:\n" + shows(check), end="\n\n")
assert check.revealed and drill.section_title(first) is not None
check.score_buttons[0].click()
print("after the 0 button:\n" + shows(check))
assert check.store.box(first.id) == 0 and [h[1] for h in check.store.history(first.id)] == [0]
assert check.current is not first and not check.revealed

# %% [markdown]
# The score sent the card to box 0, and the session will bring it back after 3 to 5 other cards:
# click through four more cards, scoring each 2, and watch for it.

# %%
seen = []
for _ in range(5):
    check.reveal_button.click()
    check.score_buttons[2].click()
    seen.append(check.current.id)
print("next cards:", ", ".join(seen))
assert first.id in seen[2:5]

# %% [markdown]
# **Where the answers live.** Every model answer names the notebook section that backs it with an output
# you can re-run: notebook 02 §2 and §3 for the ratio and its drift, notebook 04 §1 to §5 for the four
# stabilisers, notebook 05 §1, §3 and §6 for the group baseline and its failures, notebook 06 §1 to §7 for
# the variants in TRL and verl, notebook 07 §1 to §3 for off-policy data in practice.

# %% [markdown]
# ## 4. Your progress
#
# Every round drawn, grade, hint and drill answer is appended to `practice/history.jsonl`
# (`interview/history.py`). `make progress` prints it: per round, the minutes from the draw to each fix,
# the hints and their levels, the wrong attempts (grades that fixed nothing new: a first grade of the
# untouched round counts, and so does one that only repaired a regression); per topic, the drill's mean
# score per day and the seconds per answer. The next cell plots your log: time to each fix over
# rounds, and the drill score per topic over days. While `practice/` has no log yet, it plots a small
# **made-up example** instead, and says so in the title.

# %% tags=["nbval-ignore-output"]
mine = history.read()
events = mine or history.example_events()
title = "your practice log" if mine else "EXAMPLE: made-up data (practice/ has no log yet)"
fig = history.plot_progress(events, title)
plt.show()
print(history.progress(events))

# %% [markdown]
# The example log, always the same, so this notebook's check does not depend on what you practised:

# %%
example = history.example_events()
print(history.progress(example))
summary = history.rounds_summary(example)
assert [round(max(r["fix_seconds"].values()) / 60) for r in summary] == [41, 30, 26]  # faster each round
assert all(r["wrong"] == 0 for r in summary)

# %% [markdown]
# ## 5. Self-check
#
# 1. The sampler draws from raw logits; you add a softmax where `generate` calls it, and the round file trains
#    normally again. Why does `make grade` still call that bug remaining, and what else does it report?
# 2. Your fix passes every test of its function, but the grader's short run with it ends 0.2 below the fixed
#    twin's own short run. Does it count?
# 3. Why can the grader's short run not tell a bug from its fix by the reward alone?
# 4. How is the round timed, and what comes after the debugging part?
#
# <details><summary>Answers</summary>
#
# 1. Each bug lives in one function and is graded there: the edited function is dropped into the fixed twin and
#    must pass every spec and catalog test of that function. A softmax in the caller leaves `sample_from_logits`
#    itself wrong, so the bug remains; and the edited `generate`, dropped into the fixed twin, applies the softmax
#    a second time there and fails its short training run, so the grader also counts it as an edit that broke a
#    function that worked (notebook 00 §1).
# 2. No: a fix may end at most 0.15 below the fixed twin's short run (the band), which guards against a fix that
#    wrecks training (notebook 00 §1).
# 3. Eight iterations of 80 samples are too few: on seed 0 the fixed twin's reward goes from 0.387 to 0.306 over
#    the last 4, while single iterations range from 0.225 to 0.463. Bugs are told apart by the tests; the band
#    only catches a fix that wrecks training (notebook 00 §1).
# 4. About 45 minutes for a hand-out with typically three bugs (`make mock`, or `make interview` with a
#    countdown), then about 15 minutes of questions on the RL math, first on the round's own bugs
#    (notebook 00 §3 drills them).
# </details>

# %% [markdown]
# **Next: notebook 01**, *Find the silent bugs with tiny inputs*: the debugging method, then bugs B1-B11, each on
# a tiny input through both twins.
