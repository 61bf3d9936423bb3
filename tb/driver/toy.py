"""A hand-written two-tile "model" for the driver tests (the compiler's interface, by hand).

`ToyCompiled` has what ``chipotle.compiler.CompiledModel`` offers the driver (``config``,
``images``, ``programs``, ``step``, ``model.vocab_size``, ``context``) over programs written
in assembly, so that the driver and both backends are tested without the compiler:

* the host writes the step's last token and its position (two int32) at 0x0 of tile (0,0)
  and starts (1,1) then (0,0) at PC 0;
* (0,0) computes ``5 * token + pos + 10``, SENDs it to (1,1), WAITs for the answer;
* (1,1) WAITs for it, adds 7, SENDs it back to (0,0) at ``TOKEN_AT``; (0,0) rings ``0x55``.

So the "argmax" after token ``t`` at ``pos`` is ``next_token(t, pos) = 5 t + pos + 17`` (mod
2**32).  The "logits" are static SRAM contents of both tiles (random int32, set by the
images), read back in two pieces.  `scenario` exercises a backend beyond the driver (an
unaligned write, reads back, statuses, perf counters) and returns what it saw, so that the
ISA simulator and the RTL can be compared.

Faulty variants (``variant``): ``"fault"`` makes (1,1) load past the end of the SRAM
(``SRAM_RANGE`` at PC 1); ``"silent"`` makes (0,0) halt without ringing; ``"deadlock"``
makes (1,1) wait on a counter nobody bumps; ``"stray"`` makes (1,1) ring a doorbell of its own
(``0x66``) before it answers, which (0,0)'s ``0x55`` then follows.  Three leave the chip not
at rest after a right doorbell: ``"leftover"`` makes (1,1) also SEND to counter 2 of (0,0),
which nobody WAITs on (it holds 1 after the step); ``"unhalted"`` makes (1,1), after it
answered, WAIT on its counter 3, which nobody bumps (it is still waiting at PC 6);
``"double"`` makes (0,0) ring its ``0x55`` twice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chipotle.isa import assemble

TOKEN_IN = 0x0
TOKEN_AT = 0x30
LOGITS = 0x100
VOCAB = 12
DONE_CODE = 0x55


def next_token(token: int, pos: int) -> int:
    """The toy model's on-chip result after ``token`` at ``pos``."""
    return (5 * token + pos + 17) & 0xFFFFFFFF


def programs(variant: str = "ok") -> dict:
    """Return the assembly text of both tiles."""
    p00 = f"""
        ld    r1, {TOKEN_IN}
        ld    r2, {TOKEN_IN + 4}
        mul   r3, r1, 5
        add   r3, r3+10, r2
        st    0x10, r3
        send  0x20, 0x10, 8, (1, 1), 0
        wait  1, 1
        {"halt" if variant == "silent" else f"done {DONE_CODE}"}
        {f"done {DONE_CODE}" if variant == "double" else ""}
        halt
    """
    p11 = f"""
        wait  {5 if variant == "deadlock" else 0}, 1
        {"done 0x66" if variant == "stray" else ""}
        {"ld r1, 0x7ffc" if variant != "fault" else "ld r1, 0x1fffc"}
        ld    r1, 0x20
        add   r1, r1+7, 0
        st    0x28, r1
        {"send 0x40, 0x28, 8, (0, 0), 2" if variant == "leftover" else ""}
        send  {TOKEN_AT}, 0x28, 8, (0, 0), 1
        {"wait 3, 1" if variant == "unhalted" else ""}
        halt
    """
    return {(0, 0): p00, (1, 1): p11}


@dataclass(frozen=True)
class ToyPlan:
    writes: list
    starts: list
    done: tuple
    token_at: tuple
    logits_at: list


@dataclass(frozen=True)
class ToyModelConfig:
    vocab_size: int = VOCAB


class ToyCompiled:
    """The toy model, compiled for ``config`` (a mesh of at least 2 x 2)."""

    def __init__(self, config, variant: str = "ok", seed: int = 1, context: int = 16,
                 logits: np.ndarray | None = None):
        rng = np.random.default_rng(seed)
        self.config = config
        self.model = ToyModelConfig()
        self.context = context
        # (random over the whole int32 range unless given: a sampling test gives logits of a
        # few units of Q16.16, whose softmax is not one-hot)
        self.logits = (rng.integers(-2**31, 2**31, VOCAB, dtype=np.int64).astype(np.int32)
                       if logits is None else np.asarray(logits, np.int32))
        half = VOCAB // 2
        self.images = {
            (0, 0): [(LOGITS, self.logits[:half].astype("<i4").tobytes()),
                     (0x400, rng.integers(0, 256, 96, dtype=np.uint8).tobytes())],
            (1, 1): [(LOGITS, self.logits[half:].astype("<i4").tobytes()),
                     (0x7ff8, bytes(8))],
            (1, 0): [(0x200, rng.integers(0, 256, 2048, dtype=np.uint8).tobytes())],
        }
        self.programs = {xy: assemble(text) for xy, text in programs(variant).items()}
        self.logits_at = [((1, 1), LOGITS, half, VOCAB - half), ((0, 0), LOGITS, 0, half)]

    def step(self, tokens, pos) -> ToyPlan:
        if not 1 <= len(tokens) <= self.config.max_m:
            raise ValueError(f"1..{self.config.max_m} tokens per step, not {len(tokens)}")
        last, lpos = tokens[-1], pos + len(tokens) - 1
        data = np.array([last, lpos], "<u4").tobytes()
        return ToyPlan(writes=[((0, 0), TOKEN_IN, data)], starts=[((1, 1), 0), ((0, 0), 0)],
                       done=((0, 0), DONE_CODE), token_at=((0, 0), TOKEN_AT),
                       logits_at=self.logits_at)


async def scenario(backend, seed: int = 3) -> dict:
    """Drive ``backend`` through the toy model and raw backend operations; return findings.

    Everything returned must be equal between backends (cycle counts excepted, which are
    returned under ``"cycles"``).
    """
    from chipotle.driver import Driver

    rng = np.random.default_rng(seed)
    out = {}
    toy = ToyCompiled(backend.config)
    drv = Driver(toy, backend)
    await drv.load()
    # raw operations: an unaligned write merged into its words, reads of odd sizes
    blob = rng.integers(0, 256, 37, dtype=np.uint8).tobytes()
    await backend.write_sram((1, 0), 0x203, blob)
    out["blob"] = blob
    out["unaligned"] = await backend.read_sram((1, 0), 0x1f8, 64)
    out["long_read"] = await backend.read_sram((1, 0), 0x200, 2048 + 8)
    out["last_word"] = await backend.read_sram((0, 1), backend.config.sram_bytes - 8, 8)
    out["idle_status"] = await backend.status((0, 1))
    # one step with logits, then a greedy generation with a 5-token prompt (2 batches)
    s = await drv.step([3], 0, logits=True)
    out["step"] = (s.token, s.logits.tolist(), sorted(s.perf))
    g = await drv.generate([1, 4, 6, 8, 9], steps=3)
    out["generate"] = (g.tokens, g.stop_reason, g.generated, g.prefill_steps, len(g.steps))
    out["perf_instructions"] = [st.perf_per_tile[(0, 0)]["instructions"] for st in g.steps]
    out["perf_flits"] = [st.perf["ni_flits_sent"] for st in g.steps]
    out["statuses"] = {xy: await backend.status(xy) for xy in backend.config.tiles}
    out["sram"] = {xy: await backend.read_sram(xy, 0, 0x480) for xy in backend.config.tiles}
    out["perf_names"] = sorted(await backend.read_perf((1, 1)))
    out["cycles"] = [st.cycles for st in g.steps]
    out["expected_tokens"] = _expected([1, 4, 6, 8, 9], 3)
    out["logits"] = toy.logits.tolist()
    return out


def _expected(prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(next_token(ids[-1], len(ids) - 1))
    return tuple(ids)
