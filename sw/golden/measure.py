"""Measure the golden integer model against the float32 reference.

Run as ``python -m chipotle.golden.measure [--model PATH --tokenizer PATH]``.

Prints the static formats chosen by calibration, then:

* teacher-forced top-1 agreement over the first N positions of the float reference's greedy
  continuation from BOS (the golden model reads the reference's tokens; at position ``p`` its
  argmax is compared with the reference's token ``p + 1``), with the logit error after
  dequantisation (``logits * 2**-16``);
* free-running greedy decoding from BOS and from "Once upon a time": the number of generated
  tokens identical to the reference's before the first divergence.

The figures in ``docs/numerics.md`` come from this command with its defaults.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model import Checkpoint, load_checkpoint
from ..paths import DEFAULT_CHECKPOINT, DEFAULT_TOKENIZER, default_model_dir
from ..reference import Transformer
from .model import GoldenModel
from .quantize import QuantizedModel, quantize

__all__ = ["greedy", "teacher_forced", "free_running", "FreeRun", "TeacherForced", "main"]

#: Prompts of the free-running measurement ("" is BOS alone).
PROMPTS = ("", "Once upon a time")


def greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Return `prompt` followed by greedy tokens, `steps` positions in all (prompt included).

    Works with any model with ``reset()`` and ``forward(token, pos) -> logits``; the argmax is
    the first maximum.
    """
    model.reset()
    toks = list(prompt)
    for pos in range(steps):
        logits = model.forward(toks[pos], pos)
        if pos + 1 < len(toks):
            continue
        toks.append(int(np.argmax(logits)))
    return toks


@dataclass
class TeacherForced:
    """Teacher-forced comparison over `positions` positions."""

    positions: int
    agreement: float
    max_abs_err: float
    mean_abs_err: float
    logit_range: float
    seconds: float


@dataclass
class FreeRun:
    """Free-running greedy comparison from one prompt."""

    prompt: str
    prompt_tokens: int
    generated: int
    identical: int            # generated tokens equal to the reference's before divergence
    first_divergence: int | None   # index among generated tokens, None if none
    golden_text_ids: list
    reference_text_ids: list


def teacher_forced(golden: GoldenModel, reference: Transformer, positions: int = 256,
                   ref_tokens: list[int] | None = None) -> TeacherForced:
    """Compare top-1 tokens over the reference's greedy continuation from BOS (batched prefill).

    Parameters
    ----------
    golden : GoldenModel
    reference : chipotle.reference.Transformer
    positions : int
        Number of positions (at most ``seq_len``).
    ref_tokens : list of int, optional
        The reference's greedy sequence from BOS (``positions + 1`` tokens), if known.
    """
    positions = min(positions, golden.config.seq_len)
    if ref_tokens is None:
        ref_tokens = greedy(reference, [1], positions + 1)
    reference.reset()
    ref_logits = np.stack([reference.forward(t, p) for p, t in enumerate(ref_tokens[:positions])])
    golden.reset()
    t0 = time.perf_counter()
    gl = golden.forward_batch(ref_tokens[:positions], 0)
    dt = time.perf_counter() - t0
    agree = float(np.mean(np.argmax(gl, axis=-1) == np.asarray(ref_tokens[1:positions + 1])))
    err = np.abs(golden.dequantize_logits(gl) - ref_logits.astype(np.float64))
    return TeacherForced(positions, agree, float(err.max()), float(err.mean()),
                         float(ref_logits.max() - ref_logits.min()), dt)


def free_running(golden: GoldenModel, reference: Transformer, prompt_ids: list[int],
                 steps: int, prompt: str = "") -> FreeRun:
    """Decode greedily with both models from `prompt_ids` for `steps` positions in all."""
    steps = min(steps, golden.config.seq_len)
    ref = greedy(reference, prompt_ids, steps)
    gold = greedy(golden, prompt_ids, steps)
    n0 = len(prompt_ids)
    gen_r, gen_g = ref[n0:], gold[n0:]
    div = next((i for i, (a, b) in enumerate(zip(gen_g, gen_r, strict=True)) if a != b), None)
    return FreeRun(prompt, n0, len(gen_r), len(gen_r) if div is None else div, div, gold, ref)


def _formats(q: QuantizedModel) -> list[str]:
    lines = [f"residual: int16 Q{15 - q.res_frac_bits}.{q.res_frac_bits} "
             f"(calibrated max |x| {q.scales['ranges']['res']:.3f}); "
             f"calibration: {q.scales['calibration_tokens']} self-generated tokens"]
    r = q.scales["ranges"]
    for i, (ly, sc) in enumerate(zip(q.layers, q.scales["layers"], strict=True)):
        lines.append(
            f"layer {i}: q16 scale {sc['q16']:.3g} (max |q| {r['q'][i]:.2f}), "
            f"k16 scale {sc['k16']:.3g} (max |k| {r['k'][i]:.2f}), "
            f"v int8 scale {sc['v']:.3g} (max |v| {r['v'][i]:.2f}), "
            f"h1/h3 int16 Q{15 - ly.hidden_frac_bits}.{ly.hidden_frac_bits} "
            f"(max {r['hidden'][i]:.2f})")
    return lines


def main(argv=None) -> int:
    """Run the measurements and print a table; return the exit status.

    Bad input ends the command with one ``error:`` line, exit status 2, before any work: a
    missing default model file says where it was looked for and how to fetch it, a file that
    is not a checkpoint or a tokenizer names the problem, and ``--positions`` / ``--steps``
    outside what the model's ``seq_len`` allows give the range.
    """
    from ..cli import ArgumentParser, _where, file_path
    from ..paths import check_published
    from ..tokenizer import load_tokenizer

    ap = ArgumentParser(prog="python -m chipotle.golden.measure", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    d = default_model_dir()
    ap.add_argument("--model", default=None, type=file_path,
                    help=f"llama2.c checkpoint (default: {d / DEFAULT_CHECKPOINT})")
    ap.add_argument("--tokenizer", default=None, type=file_path,
                    help=f"tokenizer (default: {d / DEFAULT_TOKENIZER})")
    ap.add_argument("--positions", type=int, default=256,
                    help="teacher-forced positions, 1 .. seq_len - 1 (default 256)")
    ap.add_argument("--steps", type=int, default=256,
                    help="free-running positions per prompt, prompt included, up to seq_len "
                         "(default 256)")
    args = ap.parse_args(argv)
    paths = {}
    for kind, option, value, name in (("checkpoint", "--model", args.model, DEFAULT_CHECKPOINT),
                                      ("tokenizer", "--tokenizer", args.tokenizer,
                                       DEFAULT_TOKENIZER)):
        path = Path(value) if value is not None else d / name
        if not path.is_file():
            ap.refuse(f"{option} {path}: no such file" if value is not None
                      else _where(kind, path, option))
        if value is None:
            try:
                check_published(path, option)
            except ValueError as e:
                ap.refuse(str(e))
        paths[kind] = path
    try:
        ckpt: Checkpoint = load_checkpoint(paths["checkpoint"])
        tok = load_tokenizer(paths["tokenizer"], ckpt.config.vocab_size)
    except (OSError, ValueError) as e:        # CheckpointError, TokenizerError
        ap.refuse(str(e))
    c = ckpt.config
    if not 1 <= args.positions < c.seq_len:
        ap.error(f"--positions must be in 1 .. {c.seq_len - 1} (the teacher-forced run "
                 f"reads the reference's token after its last position; seq_len "
                 f"{c.seq_len}), not {args.positions}")
    longest = max(len(tok.encode(prompt, bos=True)) for prompt in PROMPTS)
    if not longest < args.steps <= c.seq_len:
        ap.error(f"--steps must be in {longest + 1} .. {c.seq_len} (more than the longest "
                 f"prompt's {longest} tokens, BOS included, and at most seq_len), not "
                 f"{args.steps}")
    args.model = str(paths["checkpoint"])
    t0 = time.perf_counter()
    try:
        qm = quantize(ckpt)
    except ValueError as e:                   # a checkpoint the quantiser cannot take
        ap.refuse(f"{paths['checkpoint']}: {e}")
    tq = time.perf_counter() - t0
    golden, ref = GoldenModel(qm), Transformer(ckpt)
    print(f"model {args.model}: dim {c.dim}, hidden {c.hidden_dim}, {c.n_layers} layers, "
          f"{c.n_heads} heads, {c.n_kv_heads} KV heads, vocab {c.vocab_size}, "
          f"seq_len {c.seq_len}")
    print(f"quantised in {tq:.2f} s")
    for line in _formats(qm):
        print("  " + line)
    tf = teacher_forced(golden, ref, args.positions)
    print()
    print("| measurement | value |")
    print("| --- | --- |")
    print(f"| teacher-forced top-1 agreement, {tf.positions} positions from BOS | "
          f"{tf.agreement * 100:.2f}% |")
    print(f"| max / mean abs logit error (dequantised) | {tf.max_abs_err:.3f} / "
          f"{tf.mean_abs_err:.4f} (reference logit range {tf.logit_range:.1f}) |")
    print(f"| golden batched prefill of {tf.positions} positions | {tf.seconds:.2f} s |")
    runs = []
    for prompt in PROMPTS:
        ids = tok.encode(prompt, bos=True)
        t0 = time.perf_counter()
        fr = free_running(golden, ref, ids, args.steps, prompt)
        dt = time.perf_counter() - t0
        runs.append(fr)
        where = "none" if fr.first_divergence is None else str(fr.first_divergence)
        label = repr(prompt) if prompt else "BOS"
        print(f"| free-running greedy from {label}: identical generated tokens "
              f"(of {fr.generated}); first divergence | {fr.identical}; {where} "
              f"({dt:.1f} s) |")
    print()
    for fr in runs:
        label = repr(fr.prompt) if fr.prompt else "BOS"
        n = fr.prompt_tokens + fr.identical
        print(f"{label}: common text: {tok.decode(fr.reference_text_ids[1:n], prev=1)!r}")
        if fr.first_divergence is not None:
            k, prev = n + 12, fr.reference_text_ids[n - 1]
            print(f"  reference then: {tok.decode(fr.reference_text_ids[n:k], prev=prev)!r}")
            print(f"  golden then:    {tok.decode(fr.golden_text_ids[n:k], prev=prev)!r}")
    return 0


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
