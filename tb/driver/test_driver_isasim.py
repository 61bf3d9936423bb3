"""The driver and `IsaSimBackend` on the toy two-tile model (``toy.py``); error paths."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from toy import VOCAB, ToyCompiled, next_token, scenario

from chipotle.config import CONFIGS
from chipotle.driver import (
    CONTROLLER_PERF,
    INTERFACE_PERF,
    DoorbellTimeout,
    Driver,
    IsaSimBackend,
    TileFault,
    UnexpectedDoorbell,
    UnfinishedStep,
)
from chipotle.generate import PromptTooLongError, StopReason
from chipotle.hw.tile.controller import PerfIndex
from chipotle.hw.tile.netif import Reg
from chipotle.isa import ErrorCode
from chipotle.isasim import TileState
from chipotle.sampling import Sampler

SMALL = CONFIGS["small"]


def run(coro):
    return asyncio.run(coro)


def test_perf_names_follow_the_register_map():
    assert CONTROLLER_PERF[:2] == ("cycles", "instructions") and len(CONTROLLER_PERF) == len(
        PerfIndex)
    assert INTERFACE_PERF == tuple("ni_" + Reg(r).name.lower()
                                   for r in range(Reg.FLITS_SENT, Reg.COMMANDS + 1))


def test_scenario_on_isasim():
    out = run(scenario(IsaSimBackend(SMALL)))
    toks, reason, generated, prefill, nsteps = out["generate"]
    assert toks == out["expected_tokens"]
    assert reason is StopReason.STEPS and generated == 3
    assert prefill == 2 and nsteps == 4          # 5 prompt tokens in batches of M = 4
    token, logits, names = out["step"]
    assert token == next_token(3, 0) and logits == out["logits"]
    assert "cycles" in names and "ni_flits_sent" in names
    # the unaligned write landed at 0x203 and nowhere else: (1, 0) holds the toy's image at
    # 0x200 (2,048 bytes) with the 37-byte blob over it from 0x203, zeros around; (0, 1)
    # was never written
    ((base, image),) = ToyCompiled(SMALL).images[(1, 0)]
    want = bytearray(base - 0x1f8) + bytearray(image) + bytearray(8)
    want[0x203 - 0x1f8:0x203 - 0x1f8 + len(out["blob"])] = out["blob"]
    assert len(out["blob"]) == 37 and out["unaligned"] == bytes(want[:64])
    assert out["long_read"] == bytes(want[base - 0x1f8:base - 0x1f8 + 2048 + 8])
    assert out["last_word"] == bytes(8)
    assert out["statuses"][(0, 0)].state == "halted"
    assert out["idle_status"].state == "idle"
    assert all(c > 0 for c in out["cycles"])
    # (0,0) runs 8 instructions and its halt per step; each tile SENDs one word per step:
    # a head and the word, the packet bumping the receiver's counter
    assert out["perf_instructions"] == [9] * 4
    assert out["perf_flits"] == [2 * 2] * 4


def test_unaligned_write_merges():
    be = IsaSimBackend(SMALL)
    base = np.arange(64, dtype=np.uint8).tobytes()
    run(be.write_sram((1, 0), 0x1f8, base))
    run(be.write_sram((1, 0), 0x203, b"\xff" * 5))
    got = run(be.read_sram((1, 0), 0x1f8, 64))
    want = bytearray(base)
    want[0x203 - 0x1f8:0x208 - 0x1f8] = b"\xff" * 5
    assert got == bytes(want)


def test_sampling_reads_logits_like_the_golden_loop():
    """Temperature / top-p decoding reads the logits back, dequantises them (int32 Q16.16 to
    float32) and draws from them with the foundation's sampler, as the golden loop does.  The
    logits are a few units apart, so that the draws depend on the dequantisation, the
    temperature, top-p and the seed (a one-hot softmax would draw the argmax whatever the
    driver did)."""
    be = IsaSimBackend(SMALL)
    real = np.random.default_rng(3).normal(0.0, 1.0, VOCAB).astype(np.float32)
    real[[1, 2]] = -8.0          # BOS and EOS: a draw of one would end the run early
    toy = ToyCompiled(SMALL, logits=np.round(real * 65536).astype(np.int64))
    drv = Driver(toy, be)
    run(drv.load())
    steps, temperature, topp, seed = 10, 0.8, 0.9, 42
    g = run(drv.generate([1, 3], steps=steps, temperature=temperature, topp=topp, seed=seed))

    def draws(logits, temperature=temperature, topp=topp, seed=seed):
        """The golden loop's tokens: the toy's logits are static, so the sampler's draws."""
        s = Sampler(VOCAB, temperature, topp, seed)
        want = []
        for _ in range(steps):
            t = s.sample(logits)
            if t in (1, 2):
                return want, StopReason.BOS_EOS
            want.append(t)
        return want, StopReason.STEPS

    deq = (toy.logits.astype(np.float64) / 65536).astype(np.float32)
    want, reason = draws(deq)
    assert list(g.tokens[2:]) == want and g.stop_reason is reason
    assert all(st.logits is not None for st in g.steps)
    # the stimulus tells the driver's choices apart: more than one token drawn, and other
    # draws with the raw int32 logits, greedy decoding, another seed, temperature or top-p
    assert len(set(want)) > 1
    assert draws(toy.logits.astype(np.float32))[0] != want
    assert [int(np.argmax(deq))] * steps != want
    assert draws(deq, seed=seed + 1)[0] != want
    assert draws(deq, temperature=1.6)[0] != want
    assert draws(deq, topp=0.5)[0] != want


def test_context_stop_and_prompt_too_long():
    be = IsaSimBackend(SMALL)
    drv = Driver(ToyCompiled(SMALL, context=6), be)
    run(drv.load())
    g = run(drv.generate([5, 6, 7], steps=None))
    assert g.stop_reason is StopReason.CONTEXT and len(g.tokens) == 7
    with pytest.raises(PromptTooLongError, match="longer than the compiled context of 6"):
        run(drv.generate(list(range(3, 10))))


def test_prompt_streams_before_prefill():
    """The prompt's tokens reach ``on_token`` before prefill's first step runs (a story shows
    its prompt at once); a token outside the vocabulary is refused before anything streams."""
    drv = Driver(ToyCompiled(SMALL), IsaSimBackend(SMALL))
    run(drv.load())
    events = []
    g = run(drv.generate([1, 4, 6, 8, 9], steps=2,
                         on_token=lambda ev: events.append(("token", ev.pos, ev.forced)),
                         on_step=lambda r: events.append(("step",))))
    assert g.prefill_steps == 2 and g.generated == 2
    assert events[:5] == [("token", p, True) for p in range(4)] + [("step",)], events
    assert events[5:] == [("step",), ("token", 4, False), ("step",), ("token", 5, False)], events
    events.clear()
    with pytest.raises(ValueError, match=f"token {VOCAB} is outside the vocabulary"):
        run(drv.generate([1, VOCAB, 2], steps=2, on_token=events.append,
                         on_step=events.append))
    assert events == []


def test_step_before_load_is_refused():
    drv = Driver(ToyCompiled(SMALL), IsaSimBackend(SMALL))
    with pytest.raises(RuntimeError, match="load"):
        run(drv.step([1], 0))


def test_config_mismatch_is_refused():
    with pytest.raises(ValueError, match="compiled for"):
        Driver(ToyCompiled(SMALL), IsaSimBackend(SMALL.replace(mesh_width=3)))


def test_tile_fault_names_tile_code_and_pc():
    drv = Driver(ToyCompiled(SMALL, "fault"), IsaSimBackend(SMALL))
    run(drv.load())
    with pytest.raises(TileFault, match=r"tile \(1,1\) stopped with error SRAM_RANGE at pc 1") \
            as e:
        run(drv.step([3], 0))
    assert (e.value.tile, e.value.error, e.value.pc) == ((1, 1), ErrorCode.SRAM_RANGE, 1)


def test_stray_doorbell_is_refused():
    """A doorbell other than the step's own is an error, not skipped (the driver waited on
    past it before, so a stray doorbell of a faulty program went unnoticed)."""
    drv = Driver(ToyCompiled(SMALL, "stray"), IsaSimBackend(SMALL))
    run(drv.load())
    with pytest.raises(UnexpectedDoorbell, match=r"doorbell 102 from tile \(1,1\) while "
                       r"waiting for doorbell 85 from tile \(0,0\)") as e:
        run(drv.step([3], 0))
    assert (e.value.got, e.value.want) == (((1, 1), 0x66), ((0, 0), 0x55))


UNFINISHED = {"leftover": ({(0, 0): "counters 2=1"}, r"tile \(0,0\): counters 2=1$"),
              "unhalted": ({(1, 1): "waiting at pc 6"}, r"tile \(1,1\): waiting at pc 6$"),
              "double": ({(0, 0): "doorbell 85 rang after the step's own"},
                         r"tile \(0,0\): doorbell 85 rang after the step's own$")}


@pytest.mark.parametrize("variant", sorted(UNFINISHED))
def test_unfinished_step_is_refused(variant):
    """After the right doorbell, a counter left over, a started tile that did not halt or a
    second doorbell is an error (the driver used to return the step as if the chip were at
    rest; a second doorbell then ended the next step at once, with a stale token)."""
    problems, msg = UNFINISHED[variant]
    drv = Driver(ToyCompiled(SMALL, variant), IsaSimBackend(SMALL))
    run(drv.load())
    with pytest.raises(UnfinishedStep, match="not at rest: " + msg) as e:
        run(drv.step([3], 0))
    assert e.value.problems == problems
    # the step itself computed the right token: only the check can catch it
    drv = Driver(ToyCompiled(SMALL, variant), IsaSimBackend(SMALL), check=False)
    run(drv.load())
    assert run(drv.step([3], 0)).token == next_token(3, 0)


@pytest.mark.parametrize("variant", ["silent", "deadlock"])
def test_missing_doorbell_times_out(variant):
    drv = Driver(ToyCompiled(SMALL, variant), IsaSimBackend(SMALL))
    run(drv.load())
    with pytest.raises(DoorbellTimeout, match="no doorbell") as e:
        run(drv.step([3], 0))
    assert set(e.value.statuses) == set(SMALL.tiles)


def test_slow_doorbell_times_out():
    drv = Driver(ToyCompiled(SMALL), IsaSimBackend(SMALL), timeout_cycles=3)
    run(drv.load())
    with pytest.raises(DoorbellTimeout, match="within 3 cycles"):
        run(drv.step([3], 0))


def test_backend_refuses_bad_ranges():
    be = IsaSimBackend(SMALL)
    with pytest.raises(ValueError, match="leaves the SRAM"):
        run(be.write_sram((0, 0), SMALL.sram_bytes - 4, bytes(8)))
    with pytest.raises(ValueError, match="not in the 2 x 2 mesh"):
        run(be.read_sram((2, 0), 0, 8))


@pytest.mark.parametrize("placement", ["pipeline", "tensor"])
def test_isasim_step_cycles_equal_the_compilers_estimate(placement):
    """The backend's step cycles are the step's latency on the mesh (tiles started at the
    host's time), as `chipotle.compiler.run_step_isasim` measures it: a pipeline stage that
    sat halted must not find its input "already there" on its own stale clock."""
    from chipotle.compiler import compile_model, load_isasim, run_step_isasim, small_model
    from chipotle.config import CONFIGS
    from chipotle.driver import Driver, IsaSimBackend

    cm = compile_model(small_model(), CONFIGS["small"], placement=placement)
    drv = Driver(cm, IsaSimBackend(cm.config), perf=False)
    sim = load_isasim(cm)
    steps = [([1, 5, 9], 0), ([17], 3), ([23], 4), ([3], 5)]

    async def run():
        await drv.load()
        return [await drv.step(toks, pos) for toks, pos in steps]

    got = asyncio.run(run())
    want = [run_step_isasim(sim, cm, toks, pos) for toks, pos in steps]
    for g, w in zip(got, want, strict=True):
        assert g.token == w.token
        # the backend's clock stops at the last tile's halt, a few cycles after the doorbell
        assert w.cycles <= g.cycles <= w.cycles + 64, (g.cycles, w.cycles)
    # decode on the pipeline runs every stage in turn: far more than one stage's time
    assert got[-1].cycles > 1000


def test_phase_perf_sums_equal_the_per_step_reads():
    """``perf="phase"`` reads the counters at the phase boundaries only: the same tokens and
    the same prefill and decode sums as reading them around every step."""
    from chipotle.compiler import compile_model, small_model

    cm = compile_model(small_model(), SMALL, placement="tensor")

    async def gen(perf):
        drv = Driver(cm, IsaSimBackend(cm.config), perf=perf)
        await drv.load()
        return await drv.generate([1, 5, 9, 17, 23], steps=3)

    per_step, per_phase = run(gen(True)), run(gen("phase"))
    assert per_phase.tokens == per_step.tokens
    assert all(not s.perf for s in per_phase.steps) and per_phase.phase_perf
    for phase in ("prefill", "decode", "all"):
        want = per_step.perf_sum(phase)
        assert want["mac_cycles"] > 0 and per_phase.perf_sum(phase) == want, phase
    with pytest.raises(ValueError, match="`perf` must be"):
        Driver(cm, IsaSimBackend(cm.config), perf="sometimes")


@pytest.mark.parametrize("placement", ["pipeline", "tensor"])
def test_incremental_step_writes_leave_the_same_sram(placement):
    """``incremental`` step writes send only the changed words of the step blocks, and every
    tile's SRAM after every step equals that of full writes; the programs never write the
    step block (read back after each step: what the host wrote)."""
    from chipotle.compiler import compile_model, small_model

    cm = compile_model(small_model(), SMALL, placement=placement)
    steps = [([1, 5, 9, 17], 0), ([23], 4)]          # prefill in batches of M = 4

    async def lockstep():
        drivers, sent = [], []
        for incremental in (False, True):
            be = IsaSimBackend(cm.config)
            log: list[int] = []
            write = be.write_sram

            async def counting(xy, addr, data, _write=write, _log=log):
                _log.append(len(data))
                await _write(xy, addr, data)

            be.write_sram = counting
            drv = Driver(cm, be, perf=False, incremental=incremental)
            await drv.load()
            log.clear()
            drivers.append(drv)
            sent.append(log)
        tok, pos = None, None
        for i in range(12):
            toks, p = steps[i] if i < len(steps) else ([tok], pos + 1)
            before = [sum(s) for s in sent]
            res = [await d.step(toks, p) for d in drivers]
            assert res[0].token == res[1].token and res[0].cycles == res[1].cycles
            tok, pos = res[0].token, p + len(toks) - 1
            plan = cm.step(list(toks), p)
            for xy in cm.config.tiles:
                full, inc = [await d.backend.read_sram(xy, 0, cm.config.sram_bytes)
                             for d in drivers]
                assert full == inc, (i, xy)
            for xy, addr, data in plan.writes:
                assert await drivers[1].backend.read_sram(xy, addr, len(data)) == data
            if i >= len(steps):                     # decode: a few words per tile
                full_b, inc_b = (sum(s) - b for s, b in zip(sent, before, strict=True))
                assert 0 < inc_b <= full_b // 4, (full_b, inc_b)

    run(lockstep())


def test_skipped_positions_are_refused():
    """A step must follow the positions the chip's KV cache holds, as `GoldenModel` asks:
    a step at position 5 after positions 0 .. 2 would attend over stale rows 3 and 4 (the
    driver ran it before).  A step at an earlier position starts again from there."""
    from chipotle.compiler import compile_model, small_model
    from chipotle.golden import GoldenModel

    cm = compile_model(small_model(), SMALL, placement="tensor")
    drv = Driver(cm, IsaSimBackend(cm.config), perf=False)
    gm = GoldenModel(cm.qm)

    async def scenario():
        await drv.load()
        with pytest.raises(ValueError, match=r"position 1 skips positions: the KV cache "
                           r"holds positions none"):
            await drv.step([4], 1)
        await drv.step([1, 5, 9], 0)
        with pytest.raises(ValueError, match=r"position 5 skips positions: the KV cache "
                           r"holds positions 0 \.\. 2"):
            await drv.step([4], 5)
        with pytest.raises(ValueError, match="must not be negative, not -1"):
            await drv.step([4], -1)
        a = await drv.step([17], 3)
        b = await drv.step([23], 1)               # again from position 1
        c = await drv.step([3], 2)
        with pytest.raises(ValueError, match=r"position 4 skips positions: the KV cache "
                           r"holds positions 0 \.\. 2"):
            await drv.step([4], 4)
        await drv.load()                          # a load empties the cache
        with pytest.raises(ValueError, match="holds positions none"):
            await drv.step([1], 1)
        return a, b, c

    a, b, c = run(scenario())
    gm.forward_batch([1, 5, 9], 0)
    assert a.token == int(np.argmax(gm.forward(17, 3)))
    assert b.token == int(np.argmax(gm.forward(23, 1)))
    assert c.token == int(np.argmax(gm.forward(3, 2)))


def test_a_long_step_can_be_cancelled_between_rounds():
    """Ctrl-C under ``asyncio.run`` cancels the task at its next pause: the ISA backend's
    `wait_done` pauses between the simulator's rounds (`IsaSim.rounds`), not only at the
    step's end (a fresh user's ``make sim BACKEND=isasim`` ran 90 s past a Ctrl-C)."""
    from chipotle.isa.asm import assemble
    be = IsaSimBackend(SMALL)
    # about 200,000 instructions before the doorbell: thousands of rounds
    words = assemble("li r1, 50000\nloop r1, e\nadd r2, r2+1, 0\nadd r3, r3+1, 0\n"
                     "add r4, r4+1, 0\nadd r5, r5+1, 0\ne:\ndone 1\nhalt")

    async def go():
        await be.write_imem((0, 0), words)
        await be.start((0, 0), 0)
        task = asyncio.create_task(be.wait_done(10**9))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return be.sim.tile((0, 0))

    t = asyncio.run(go())
    assert t.state == TileState.RUNNING, t.state
    assert 0 < t.perf.instructions < 10_000, t.perf.instructions


@pytest.mark.parametrize("in_asyncio", [True, False])
def test_a_simulator_error_after_the_doorbell_is_raised(in_asyncio):
    """Only a deadlock and the instruction limit become a `DoorbellTimeout`'s detail; any
    other error of the simulator is raised, even when a doorbell came before it (it was
    dropped, and the step returned as if nothing happened)."""
    import types
    be = IsaSimBackend(SMALL)
    drv = Driver(ToyCompiled(SMALL), be)
    run(drv.load())
    sim = be.sim

    def rounds(self, *a, **k):
        yield from type(self).rounds(self, *a, **k)
        raise NotImplementedError("a simulator bug")

    def run_all(self, *a, **k):
        for _ in rounds(self):
            pass
    sim.rounds = types.MethodType(rounds, sim)
    sim.run = types.MethodType(run_all, sim)
    if in_asyncio:
        with pytest.raises(NotImplementedError, match="a simulator bug"):
            run(drv.step([1], 0))
    else:       # as under cocotb: no asyncio loop runs the coroutine
        coro = be.wait_done(10**6)
        with pytest.raises(NotImplementedError, match="a simulator bug"):
            coro.send(None)


def test_a_refused_load_leaves_the_loaded_model():
    """`Driver.load(backdoor=True)` on a backend without a back door is refused before it
    resets anything: the model loaded before still runs."""
    be = IsaSimBackend(SMALL)
    drv = Driver(ToyCompiled(SMALL), be)
    run(drv.load())
    before = run(be.read_sram((1, 0), 0x200, 64))
    with pytest.raises(ValueError, match="IsaSimBackend has no back-door SRAM load"):
        run(drv.load(backdoor=True))
    assert drv.loaded and run(be.read_sram((1, 0), 0x200, 64)) == before
    assert run(drv.step([3], 0)).token == next_token(3, 0)
