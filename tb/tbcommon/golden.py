"""Bit-exactness of a compiled model on the ISA simulator against `chipotle.golden`."""

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
