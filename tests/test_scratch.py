"""From scratch (interview/scratch.py, scratch_grader.py): the stub file, and the grader sentence by sentence
of the spec (SPEC.md).

  - a stub file fails every sentence it stubs, as "not written yet", and nothing else;
  - the fixed twin's functions spliced in pass every sentence (and train like the fixed twin);
  - a learner's implementation with one known mistake fails exactly the sentences that mistake breaks;
  - bad input gives one `cannot grade ...` line and exit code 2, as the mock grader does.
Every file is written under tmp_path: nothing touches practice/.
"""

from __future__ import annotations

import ast
import inspect
import io

import pytest

import grpo_fixed
import grpo_support
from interview import checks, cli, sandbox, scratch, scratch_grader, spec, spec_cases, splice
from workbook import catalog

GRADED = spec_cases.graded_sentences()  # the sentences of SPEC.md with cases: all but S15 signatures


def new_file(tmp_path, funcs=None):
    return scratch.new_scratch(funcs, tmp_path)


def handout_function(name: str) -> str:
    """The text of `name` in the no-bug hand-out: the fixed twin's function, as a learner would write it."""
    source = scratch.handout_source()
    node = splice.function_nodes(source)[name]
    return "".join(source.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno])


def fill(path, functions: dict[str, str]):
    """Replace functions of a scratch file in place, as the learner would."""
    path.write_text(scratch.splice(path.read_text(), functions))
    return path


def failing(path) -> dict[str, checks.Outcome]:
    return {o.key: o for o in scratch_grader.grade_outcomes(path) if not o.ok}


def catalog_test_names(site: str) -> set[str]:
    ids = {b.id for b in catalog.BUGS if b.function == site}
    tests = scratch_grader.catalog_test_module().catalog_tests()
    return {name for name, (_, test_ids, _) in tests.items() if ids & test_ids}


# ----------------------------------------------------------------------------------------------
# Making a scratch file


def test_scratch_files_are_numbered_and_stub_the_spec_functions(tmp_path):
    first, second = new_file(tmp_path), new_file(tmp_path)
    assert (first.name, second.name) == ("scratch_1.py", "scratch_2.py")
    text = first.read_text()
    assert f"{scratch.FUNCS_HEADER} sample_from_logits, group_advantage, grpo_loss" in text
    nodes = splice.function_nodes(text)
    for name in scratch.SPEC_FUNCS:
        body = nodes[name].body
        raised = body[-1]
        assert isinstance(raised, ast.Raise) and "NotImplementedError" in ast.unparse(raised), name
        doc = ast.get_docstring(nodes[name])
        assert ast.get_docstring(splice.function_nodes(splice.FIXED.read_text())[name]).split("\n")[0] in doc
        for sentence in spec_cases.graded_sentences(name):
            assert " ".join(sentence.text.split()) in " ".join(doc.split()), (name, sentence.key)
    assert "# FIX" not in text, "the hand-out must not name the bugs"
    assert "def masked_mean" in text and "raise NotImplementedError" not in handout_function("masked_mean")


def test_stubs_keep_the_signatures(tmp_path):
    module, _ = scratch_grader.load_scratch(new_file(tmp_path, "all"))
    for name in scratch.SITES:
        assert inspect.signature(getattr(module, name)) == inspect.signature(getattr(grpo_fixed, name)), name


@pytest.mark.parametrize("funcs, expected", [
    ("all", scratch.SITES),
    ("masked_mean, kl_to_reference", ("masked_mean", "kl_to_reference")),
    ("kl_to_reference,masked_mean", ("masked_mean", "kl_to_reference")),  # catalog order
    (None, scratch.SPEC_FUNCS),
    ("", scratch.SPEC_FUNCS),
])
def test_parse_funcs(funcs, expected):
    assert scratch.parse_funcs(funcs) == expected


def test_unknown_funcs_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown FUNCS"):
        scratch.parse_funcs("masked_mean,train")
    assert cli.main(["scratch", "--funcs", "nope", "--out-dir", str(tmp_path)]) == 2
    assert "unknown FUNCS ['nope']" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------
# Stubs fail what they stub, and nothing else


@pytest.mark.parametrize("funcs", [None, "all", "sample_from_logits", "group_advantage", "grpo_loss",
                                   "masked_mean,kl_to_reference", "completion_logits"])
def test_stub_file_fails_every_sentence_it_stubs_and_nothing_else(tmp_path, funcs):
    stubbed = scratch.parse_funcs(funcs)
    expected = {s.key for s in GRADED if set(s.funcs) & set(stubbed)}
    expected |= set().union(*(catalog_test_names(f) for f in stubbed if f not in scratch.SPEC_FUNCS))
    fails = failing(new_file(tmp_path, funcs))
    assert set(fails) == expected
    assert all(o.not_written for o in fails.values()), [o for o in fails.values() if not o.not_written]


def test_every_spec_sentence_and_catalog_site_is_graded():
    assert set(spec_cases.CASES) == set(spec.SENTENCES) - {"signatures"}, "a SPEC.md sentence without cases"
    assert [s.key for s in GRADED] == [k for k in spec.SENTENCES if k != "signatures"]  # SPEC.md's order
    assert {f for s in GRADED for f in s.funcs} == set(scratch.SPEC_FUNCS)
    for site in scratch.SITES:
        if site not in scratch.SPEC_FUNCS:
            assert catalog_test_names(site), f"no catalog test grades {site}"


@pytest.mark.parametrize("funcs", [None, "all"])
def test_the_fixed_functions_pass_everything(tmp_path, funcs):
    path = new_file(tmp_path, funcs)
    fill(path, {f: handout_function(f) for f in scratch.parse_funcs(funcs)})
    outcomes = scratch_grader.grade_outcomes(path)
    assert [o for o in outcomes if not o.ok] == []
    catalog_tests = set().union(*(catalog_test_names(f) for f in scratch.SITES if f not in scratch.SPEC_FUNCS))
    assert len(outcomes) == len(GRADED) + (0 if funcs is None else len(catalog_tests))  # a shared test counts once


def test_buggy_twin_functions_fail_only_their_own_lines(tmp_path):
    """grpo_buggy's versions of a spec function and a catalog site: only their own sentences / tests fail."""
    path = new_file(tmp_path, "grpo_loss,kl_to_reference")
    buggy = splice.HANDOUT.read_text()
    nodes = splice.function_nodes(buggy)
    text = {f: "".join(buggy.splitlines(keepends=True)[nodes[f].lineno - 1 : nodes[f].end_lineno])
            for f in ("grpo_loss", "kl_to_reference")}
    fails = failing(fill(path, text))
    assert set(fails) == {"clip-before-A"} | catalog_test_names("kl_to_reference")
    assert not any(o.not_written for o in fails.values())


# ----------------------------------------------------------------------------------------------
# A learner's implementation, and single known mistakes in it

LEARNER = {
    "sample_from_logits": '''\
def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples, replacement=True, generator=generator)
''',
    "group_advantage": '''\
def group_advantage(rewards, eps: float = 1e-8):
    def checked(rewards, eps):
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
            raise ValueError(f"eps must be positive and finite, got {eps!r}")
        if not isinstance(rewards, (list, tuple)) or len(rewards) == 0:
            raise ValueError("rewards must be a nonempty list")
        values = []
        for x in rewards:
            if isinstance(x, bool) or not isinstance(x, numbers.Real):
                raise ValueError(f"not a real number: {x!r}")
            try:
                value = float(x)
            except OverflowError:
                raise ValueError(f"{x} is not representable in float64") from None
            if not math.isfinite(value):
                raise ValueError(f"not finite: {x!r}")
            values.append(value)
        return values

    values = checked(rewards, eps)
    r = torch.tensor(values, dtype=torch.float64)
    if bool((r == r[0]).all()):
        return torch.zeros_like(r)
    scale = r.abs().max()
    r = r / scale  # no overflow in the mean or the variance
    centered = r - r.mean()
    std = centered.pow(2).mean().sqrt()
    return centered / (std + eps / scale)
''',
    "grpo_loss": '''\
def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    mask = mask.bool()
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros((), dtype=logprobs.dtype))
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv
    surrogate = torch.where(mask, torch.min(unclipped, clipped), torch.zeros((), dtype=ratio.dtype))
    return -surrogate.sum() / mask.sum().clamp(min=1)
''',
}

# (function, the learner's line, the mistaken line, the sentences it breaks)
MISTAKES = {
    "no softmax": ("sample_from_logits", "probs = torch.softmax(logits, dim=-1)",
                   "probs = logits - logits.min(dim=-1, keepdim=True).values", {"softmax"}),
    "without replacement": ("sample_from_logits", "replacement=True", "replacement=False", {"replacement"}),
    "global RNG": ("sample_from_logits", ", generator=generator)", ")", {"generator"}),
    "sample std": ("group_advantage", "std = centered.pow(2).mean().sqrt()",
                   "std = centered.pow(2).sum().div(len(values) - 1).sqrt()", {"population-std"}),
    "eps inside the sqrt": ("group_advantage",
                            "std = centered.pow(2).mean().sqrt()\n    return centered / (std + eps / scale)",
                            "return centered / (centered.pow(2).mean() + eps / scale).sqrt()", {"eps"}),
    "no validation": ("group_advantage", "values = checked(rewards, eps)", "values = [float(x) for x in rewards]",
                      {"validation"}),
    "mean and variance overflow": ("group_advantage", "r = r / scale  # no overflow in the mean or the variance",
                                   "scale = torch.ones(())", {"overflow"}),
    "clip the product": ("grpo_loss", "clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv",
                         "clipped = torch.clamp(ratio * adv, 1 - clip, 1 + clip)", {"clip-before-A"}),
    "clipped term only": ("grpo_loss", "torch.min(unclipped, clipped)", "clipped", {"min"}),
    "denominator counts padding": ("grpo_loss", "mask.sum().clamp(min=1)", "mask.numel()", {"masking"}),
    "0/0 when all masked": ("grpo_loss", "mask.sum().clamp(min=1)", "mask.sum()", {"all-masked"}),
    "clip radius hard-coded": ("grpo_loss", "torch.clamp(ratio, 1 - clip, 1 + clip)", "torch.clamp(ratio, 0.8, 1.2)",
                               {"independent"}),
}


# Further plausible wrong implementations: (function, the learner's line, the wrong line, sentences among those
# that must fail[, further (line, wrong line) pairs]). Each must fail at least one sentence; some fail several.
WRONG = {
    "softmax over the batch (dim=0)": ("sample_from_logits", "torch.softmax(logits, dim=-1)",
                                       "torch.softmax(logits, dim=0)", {"softmax"}),
    "greedy (argmax), not sampled": (
        "sample_from_logits", "return torch.multinomial(probs, num_samples, replacement=True, generator=generator)",
        "return probs.argmax(-1, keepdim=True).expand(*probs.shape[:-1], num_samples)", {"softmax"}),
    "temperature 2 left in": ("sample_from_logits", "torch.softmax(logits, dim=-1)",
                              "torch.softmax(logits / 2, dim=-1)", {"softmax"}),
    "exp without the max subtracted": ("sample_from_logits", "probs = torch.softmax(logits, dim=-1)",
                                       "probs = logits.exp() / logits.exp().sum()", {"softmax"}),
    "one draw repeated num_samples times": (
        "sample_from_logits", "return torch.multinomial(probs, num_samples, replacement=True, generator=generator)",
        "return torch.multinomial(probs, 1, generator=generator).expand(*probs.shape[:-1], num_samples)",
        {"replacement"}),
    "a copy of the generator": ("sample_from_logits", ", generator=generator)",
                                ", generator=torch.Generator().set_state(generator.get_state()))", {"generator"}),
    "max(std, eps)": ("group_advantage", "return centered / (std + eps / scale)",
                      "return centered / torch.clamp(std, min=eps / scale)", {"eps"}),
    "no eps, nan_to_num": ("group_advantage", "return centered / (std + eps / scale)",
                           "return torch.nan_to_num(centered / std)", {"eps"}),
    "eps not rescaled with the rewards": ("group_advantage", "return centered / (std + eps / scale)",
                                          "return centered / (std + eps)", {"eps"}),
    "mean absolute deviation": ("group_advantage", "std = centered.pow(2).mean().sqrt()",
                                "std = centered.abs().mean()", {"population-std"}),
    "std(correction=0) without an overflow guard": (
        "group_advantage", "r = r / scale  # no overflow in the mean or the variance",
        "scale = torch.ones((), dtype=torch.float64)", {"overflow"}),
    "ints refused": ("group_advantage", "if isinstance(x, bool) or not isinstance(x, numbers.Real):",
                     "if not isinstance(x, float):", {"validation"}),
    "textbook formula, no guards": ("group_advantage",
                                    "if bool((r == r[0]).all()):\n        return torch.zeros_like(r)\n"
                                    "    scale = r.abs().max()",
                                    "scale = torch.ones((), dtype=torch.float64)", {"constant", "overflow"}),
    "ratio without exp": ("grpo_loss", "ratio = torch.exp(log_ratio)", "ratio = log_ratio", {"ratio"}),
    "ratio reversed": ("grpo_loss", "logprobs - old_logprobs.detach()", "old_logprobs - logprobs", {"ratio"}),
    "max, not min": ("grpo_loss", "torch.min(unclipped, clipped)", "torch.max(unclipped, clipped)", {"min"}),
    "min of the ratios, then times A": ("grpo_loss", "torch.min(unclipped, clipped)",
                                        "torch.min(ratio, torch.clamp(ratio, 1 - clip, 1 + clip)) * adv",
                                        {"clip-before-A"}),
    "mean per sequence, then over sequences": ("grpo_loss", "return -surrogate.sum() / mask.sum().clamp(min=1)",
                                               "return -(surrogate.sum(1) / mask.sum(1).clamp(min=1)).mean()",
                                               {"masking"}),
    "masked by multiplying (NaN leaks)": (
        "grpo_loss", "torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros((), dtype=logprobs.dtype))",
        "logprobs - old_logprobs.detach()", {"masking"}, (
            "torch.where(mask, torch.min(unclipped, clipped), torch.zeros((), dtype=ratio.dtype))",
            "torch.min(unclipped, clipped) * mask")),
    "a detached zero when all masked": ("grpo_loss", "return -surrogate.sum() / mask.sum().clamp(min=1)",
                                        "return -surrogate.sum() / mask.sum() if mask.any() else torch.tensor(0.0)",
                                        {"all-masked"}),
    "logprobs detached": ("grpo_loss", "log_ratio = torch.where(mask, logprobs - old_logprobs.detach(),",
                          "log_ratio = torch.where(mask, logprobs.detach() - old_logprobs.detach(),",
                          {"clip-before-A"}),
    "lower clip bound 1 / (1 + clip)": ("grpo_loss", "torch.clamp(ratio, 1 - clip, 1 + clip)",
                                       "torch.clamp(ratio, 1 / (1 + clip), 1 + clip)", {"clip-before-A"}),
}

# Correct ways to write the spec's functions that the fixed twin does not use: each passes every sentence.
CORRECT = {
    "sample_from_logits: inverse CDF": """\
def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    probs = torch.softmax(logits.double(), dim=-1)
    cdf = probs.cumsum(-1)
    u = torch.rand(*probs.shape[:-1], num_samples, generator=generator, dtype=probs.dtype) * cdf[..., -1:]
    return torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1)
""",
    "sample_from_logits: Gumbel-max": """\
def sample_from_logits(logits, num_samples: int = 1, *, generator=None):
    u = torch.rand(*logits.shape[:-1], num_samples, logits.shape[-1], generator=generator, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-300)))
    return (logits.double().unsqueeze(-2) + gumbel).argmax(-1)
""",
    "group_advantage: std(correction=0) with an overflow guard": """\
def group_advantage(rewards, eps: float = 1e-8):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < math.inf:
        raise ValueError("eps must be positive and finite")
    if not isinstance(rewards, list) or not rewards:
        raise ValueError("rewards must be a nonempty list")
    if any(isinstance(x, bool) or not isinstance(x, numbers.Real) for x in rewards):
        raise ValueError("rewards must be real numbers")
    try:
        r = torch.tensor([float(x) for x in rewards], dtype=torch.float64)
    except OverflowError:
        raise ValueError("a reward float64 cannot hold") from None
    if not torch.isfinite(r).all():
        raise ValueError("rewards must be finite")
    if bool((r == r[0]).all()):
        return torch.zeros_like(r)
    scale = r.abs().max()  # the overflow guard: everything in units of the largest |reward|
    r = r / scale
    return (r - r.mean()) / (r.std(correction=0) + eps / scale)
""",
    "group_advantage: Python floats and math.fsum": """\
def group_advantage(rewards, eps: float = 1e-8):
    if type(eps) not in (int, float) or not (0 < eps < math.inf):
        raise ValueError("eps must be a positive finite number")
    if type(rewards) is not list or len(rewards) == 0 or any(type(x) not in (int, float) for x in rewards):
        raise ValueError("rewards must be a nonempty list of numbers")
    try:
        values = [float(x) for x in rewards]
    except OverflowError:
        raise ValueError("too large for float64") from None
    if not all(math.isfinite(x) for x in values):
        raise ValueError("rewards must be finite")
    if all(x == values[0] for x in values):
        return torch.zeros(len(values), dtype=torch.float64)
    scale = max(abs(x) for x in values)
    xs = [x / scale for x in values]
    mean = math.fsum(xs) / len(xs)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / len(xs))
    return torch.tensor([(x - mean) / (std + eps / scale) for x in xs], dtype=torch.float64)
""",
    "grpo_loss: clipped in log space": """\
def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    mask = mask.bool()
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros((), dtype=logprobs.dtype))
    adv = advantages.detach()[:, None]  # (N, 1)
    unclipped = log_ratio.exp() * adv
    clipped = log_ratio.clamp(math.log(1 - clip), math.log1p(clip)).exp() * adv
    per_token = torch.where(mask, torch.minimum(unclipped, clipped), torch.zeros((), dtype=adv.dtype))
    return -per_token.sum() / max(int(mask.sum()), 1)
""",
    "grpo_loss: PPO's max of the negated terms": """\
def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):
    m = mask.to(logprobs.dtype)
    ratio = torch.exp(torch.nan_to_num(logprobs - old_logprobs.detach()) * m)
    a = advantages.detach().unsqueeze(-1)
    losses = torch.max(-ratio * a, -torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * a)
    return (losses * m).sum() / m.sum().clamp(min=1.0)
""",
}


def learner_file(tmp_path, mistake: str | None = None):
    functions = dict(LEARNER)
    if mistake is not None:
        name, first_right, first_wrong, _, *more = {**MISTAKES, **WRONG}[mistake]
        for right, wrong in [(first_right, first_wrong), *more]:  # a wrong one may change more than one line
            assert functions[name].count(right) == 1, f"anchor of {mistake!r} not found once"
            functions[name] = functions[name].replace(right, wrong)
    return fill(new_learner_file(tmp_path), functions)


def new_learner_file(tmp_path):
    """A stub file where the learner added an import their functions use (the hand-out has no `numbers`)."""
    path = new_file(tmp_path)
    own_import = "import math\nimport numbers  # the learner's own: fixed_with carries it into the graded copies\n"
    path.write_text(replace_once(path.read_text(), "import math\n", own_import))
    return path


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} is not in the text once"
    return text.replace(old, new, 1)


def test_the_learner_solution_passes(tmp_path):
    assert failing(learner_file(tmp_path)) == {}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_one_known_mistake_fails_exactly_the_sentences_it_breaks(tmp_path, mistake):
    fails = failing(learner_file(tmp_path, mistake))
    assert set(fails) == MISTAKES[mistake][3]
    assert not any(o.not_written for o in fails.values())


@pytest.mark.parametrize("wrong", list(WRONG))
def test_a_wrong_implementation_fails_a_sentence(tmp_path, wrong):
    fails = failing(learner_file(tmp_path, wrong))
    assert WRONG[wrong][3] <= set(fails), f"{wrong!r} slips through: fails only {sorted(fails)}"
    assert not any(o.not_written or o.breach for o in fails.values())


def test_at_least_14_wrong_implementations_of_the_three_spec_functions():
    assert len(WRONG) >= 14
    assert {name for name, *_ in WRONG.values()} == set(scratch.SPEC_FUNCS)


@pytest.mark.parametrize("correct", list(CORRECT))
def test_a_correct_alternative_passes_every_sentence(tmp_path, correct):
    name = correct.split(":")[0]
    path = fill(new_learner_file(tmp_path), {**LEARNER, name: CORRECT[correct]})
    assert failing(path) == {}


def test_two_correct_alternatives_per_spec_function():
    assert sorted(c.split(":")[0] for c in CORRECT) == sorted(2 * scratch.SPEC_FUNCS)


def test_a_failure_prints_yours_beside_expected_on_the_smallest_input(tmp_path):
    out = io.StringIO()
    code = scratch_grader.grade(learner_file(tmp_path, "sample std"), out=out, train=False)
    text = out.getvalue()
    assert code == 1
    lines = text.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("fail")]
    assert len(failed) == 1 and "population standard deviation" in lines[failed[0]]
    detail = lines[failed[0] + 1 : failed[0] + 4]
    assert detail[0].strip() == "on rewards [0.0, 1.0]:"  # the smallest of the sentence's inputs
    assert detail[1].split() == ["yours", "[-0.7071,", "0.7071]"]
    assert detail[2].split() == ["expected", "[-1,", "1]"]
    assert sum(line.startswith("pass") for line in lines) == len(GRADED) - 1
    assert lines[-1] == f"{len(GRADED) - 1}/{len(GRADED)} pass, 1 fail"


def test_the_grader_never_raises_on_wild_code(tmp_path):
    """Code that returns nonsense types, loops forever or raises odd errors becomes fail lines, not a crash."""
    wild = {
        "sample_from_logits": "def sample_from_logits(logits, num_samples: int = 1, *, generator=None):\n"
                              "    return 'tokens'\n",
        "group_advantage": "def group_advantage(rewards, eps: float = 1e-8):\n    while True:\n        pass\n",
        "grpo_loss": "def grpo_loss(logprobs, old_logprobs, advantages, mask, clip: float = 0.2):\n"
                     "    raise KeyError('boom')\n",
    }
    path = fill(new_file(tmp_path, "sample_from_logits,grpo_loss"), {k: v for k, v in wild.items()
                                                                     if k != "group_advantage"})
    out = io.StringIO()
    assert scratch_grader.grade(path, out=out, train=False) == 1
    assert "raises KeyError: 'boom'" in out.getvalue()


def test_an_endless_loop_hits_the_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "TEST_SECONDS", 0.2)
    path = fill(new_file(tmp_path, "group_advantage"), {
        "group_advantage": "def group_advantage(rewards, eps: float = 1e-8):\n    while True:\n        pass\n"})
    fails = failing(path)
    assert {s.key for s in GRADED if "group_advantage" in s.funcs} == set(fails)
    assert all("TimeLimit" in o.yours for o in fails.values())


# ----------------------------------------------------------------------------------------------
# The training run


def test_training_line_when_every_stub_is_written(tmp_path):
    path = fill(new_file(tmp_path), {f: handout_function(f) for f in scratch.SPEC_FUNCS})
    out = io.StringIO()
    assert scratch_grader.grade(path, out=out, train_overrides=dict(steps=3)) == 0
    line = next(line for line in out.getvalue().splitlines() if "final reward" in line)
    yours, fixed = (float(x.rstrip(",")) for x in (line.split()[3], line.split()[6]))
    assert yours == fixed, "the fixed twin's own functions must train exactly like the fixed twin"
    assert out.getvalue().splitlines()[-1] == f"{len(GRADED) + 1}/{len(GRADED) + 1} pass"


def test_no_training_while_a_stub_is_left(tmp_path):
    path = fill(new_file(tmp_path), {"grpo_loss": handout_function("grpo_loss")})
    out = io.StringIO()
    assert scratch_grader.grade(path, out=out) == 1
    assert "no training run yet: sample_from_logits, group_advantage still to write" in out.getvalue()
    assert "final reward" not in out.getvalue()


def test_training_that_produces_nan_fails(tmp_path):
    nan_loss = LEARNER["grpo_loss"].replace("return -surrogate.sum()", "return float('nan') * surrogate.sum()")
    path = fill(new_learner_file(tmp_path), {**LEARNER, "grpo_loss": nan_loss})
    outcomes = {o.key: o for o in scratch_grader.grade_outcomes(path, train=False)}
    outcome, _ = scratch_grader.training_outcome(scratch_grader.load_scratch(path)[0], scratch.SPEC_FUNCS, steps=2)
    assert not outcome.ok and outcome.yours == "2 non-finite losses"
    assert not outcomes["ratio"].ok  # the sentences see it too


@pytest.mark.slow
def test_default_training_run_matches_the_fixed_twin(tmp_path):
    path = fill(new_file(tmp_path), {f: handout_function(f) for f in scratch.SPEC_FUNCS})
    outcome, line = scratch_grader.training_outcome(scratch_grader.load_scratch(path)[0], scratch.SPEC_FUNCS)
    assert outcome.ok
    summary = grpo_support.summarize_run(grpo_fixed.train(seed=0), 0.0)
    assert f"yours {summary['final_reward']:.3f}, fixed twin {summary['final_reward']:.3f}" in line


# ----------------------------------------------------------------------------------------------
# Bad input: one line on stderr, exit code 2 (the mock grader's handling)


def bad_files(tmp_path):
    good = new_file(tmp_path).read_text()
    files = {
        "missing": tmp_path / "scratch_missing.py",
        "syntax": tmp_path / "scratch_syntax.py",
        "import": tmp_path / "scratch_import.py",
        "signature": tmp_path / "scratch_signature.py",
        "removed": tmp_path / "scratch_removed.py",
        "funcs line": tmp_path / "scratch_funcs.py",
    }
    files["syntax"].write_text(good + "\ndef broken(:\n")
    files["import"].write_text(good.replace("import torch\n", "import torch\nundefined_name\n", 1))
    files["signature"].write_text(good.replace("advantages, mask, clip: float = 0.2)", "advantages, mask, clip=0.3)"))
    files["removed"].write_text(good.replace("def masked_mean(", "def masked_average("))
    files["funcs line"].write_text(good.replace(f"{scratch.FUNCS_HEADER} sample_from_logits",
                                                f"{scratch.FUNCS_HEADER} sample_from_logit"))
    return files


@pytest.mark.parametrize("kind, says", [("missing", "no such file"), ("syntax", "syntax error"),
                                        ("import", "NameError"), ("signature", "changed its signature"),
                                        ("removed", "no function masked_mean"), ("funcs line", "unknown FUNCS")])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, kind, says):
    path = bad_files(tmp_path)[kind]
    assert scratch_grader.grade(path) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cannot grade {path}") and says in lines[0], lines


def test_make_grade_dispatches_scratch_files_here(tmp_path, capsys):
    """`python -m interview grade` hands a practice/scratch_*.py to the scratch grader, exit code included."""
    path = fill(new_file(tmp_path), {"grpo_loss": handout_function("grpo_loss")})
    assert cli.grade_command([str(path)]) == 1
    assert "no training run yet" in capsys.readouterr().out
