"""Bit-exactness against `chipotle.golden`: a compiled model on the ISA simulator, and the
steps of a generation run elsewhere (the RTL through `chipotle.sim.chiprun`, a driver)."""

import numpy as np


def assert_isasim_bit_exact(compiled, qm, prompt, steps, argmax=False):
    """Prefill `prompt` (token ids) with `compiled`'s plans, then decode `steps` greedy
    tokens, on a fresh ISA simulator; the logits of every plan's last row and of every
    decode step must equal `GoldenModel(qm)`'s bit for bit (with `argmax`, and the on-chip
    token its argmax).  Returns the last step's result."""
    from chipotle.compiler import load_isasim, run_plan_isasim, run_step_isasim
    from chipotle.golden import GoldenModel
    golden = GoldenModel(qm)
    sim = load_isasim(compiled)
    for plan in compiled.plans(prompt, 0):
        ref = golden.forward_batch(list(plan.tokens), plan.pos)[-1]
        r = run_plan_isasim(sim, compiled, plan)
        np.testing.assert_array_equal(r.logits, ref)
        if argmax:
            assert r.token == int(np.argmax(ref))
    tok, pos = r.token, len(prompt)
    for _ in range(steps):
        ref = golden.forward(tok, pos)
        r = run_step_isasim(sim, compiled, [tok], pos)
        np.testing.assert_array_equal(r.logits, ref)
        tok, pos = r.token, pos + 1
    return r


def golden_greedy(qm, prompt, n_tokens):
    """Return ``(tokens, {position: int32 logits})`` of greedy decoding on `GoldenModel(qm)`:
    `prompt` (token ids) followed by `n_tokens` argmax tokens, and the logits at every
    position that produced one (the prompt's and all but the last generated token's)."""
    from chipotle.golden import GoldenModel
    g = GoldenModel(qm)
    ids, logits = list(prompt), {}
    for pos in range(len(prompt) + n_tokens - 1):
        logits[pos] = g.forward(ids[pos], pos)
        if pos >= len(prompt) - 1:
            ids.append(int(np.argmax(logits[pos])))
    return ids, logits


def assert_steps_golden(steps, tokens, qm, prompt, n_tokens):
    """Assert a greedy generation of `n_tokens` after `prompt` equals the golden model's:
    ``tokens`` (prompt included) its tokens, and every step's int32 ``logits`` (of the
    step's last row, ``pos + len(tokens) - 1``) and on-chip ``token`` its logits and their
    argmax.  ``steps``: dicts with ``pos``, ``tokens``, ``token``, ``logits``."""
    want_ids, want = golden_greedy(qm, prompt, n_tokens)
    assert list(tokens) == want_ids, (tokens, want_ids)
    for s in steps:
        last = s["pos"] + len(s["tokens"]) - 1
        assert np.array_equal(s["logits"], want[last]), f"logits differ at position {last}"
        assert s["token"] == int(np.argmax(want[last])), f"token differs at position {last}"
