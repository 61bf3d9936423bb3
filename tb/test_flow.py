"""The cached Verilog generation of ``chipotle.sim.flow``."""

import os
import subprocess

import pytest

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import flow, toolchain


def test_generate_verilog_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPOTLE_BUILD_DIR", str(tmp_path))
    calls = []

    def factory(width=8):
        calls.append(width)
        return SkidBuffer(width)

    first = flow.generate_verilog_cached(factory, "skid", "w8")
    again = flow.generate_verilog_cached(factory, "skid", "w8")
    assert calls == [8], "the second call must come from the cache"
    assert first == again and "module skid(" in first
    assert first == flow.generate_verilog(SkidBuffer(8), name="skid")
    other = flow.generate_verilog_cached(lambda: factory(16), "skid", "w16")
    assert calls == [8, 16] and other != first
    assert len(list((tmp_path / "verilog").glob("skid-*.v"))) == 2


def test_cache_names_the_sources_the_process_imported(tmp_path, monkeypatch):
    """Sources edited on disk during a run (a bench over several prompts) do not rename what
    the run generates: its modules are the ones it imported, so the cache stays under the
    digest the process first saw, and a later process sees the new digest."""
    monkeypatch.setenv("CHIPOTLE_BUILD_DIR", str(tmp_path))
    disk = ["before the edit"]
    monkeypatch.setattr(flow, "source_digest", lambda: disk[0])
    flow._process_digest.cache_clear()
    calls = []

    def factory():
        calls.append(1)
        return SkidBuffer(8)

    flow.generate_verilog_cached(factory, "skid", "w8")
    disk[0] = "after the edit"
    flow.generate_verilog_cached(factory, "skid", "w8")
    assert len(calls) == 1 and len(list((tmp_path / "verilog").glob("skid-*.v"))) == 1
    flow._process_digest.cache_clear()         # a new process: the edited sources
    flow.generate_verilog_cached(factory, "skid", "w8")
    assert len(calls) == 2 and len(list((tmp_path / "verilog").glob("skid-*.v"))) == 2
    flow._process_digest.cache_clear()


def test_cocotb_results_are_checked(tmp_path):
    """`CocotbRun.raise_on_failure` on a synthetic cocotb results file: a failure is named
    with its message, a skipped test is not taken for a passed one, a requested test that did
    not pass (missing or skipped) is refused, and a run in which nothing passed is refused."""
    import pytest

    def results(*cases):
        path = tmp_path / f"results{len(list(tmp_path.iterdir()))}.xml"
        body = "".join(f'<testcase classname="m" name="{n}">{inner}</testcase>'
                       for n, inner in cases)
        path.write_text(f'<testsuites><testsuite name="all">{body}</testsuite></testsuites>')
        return flow._parse_results("verilator", path)

    ok = results(("a", ""), ("b", ""), ("c", "<skipped/>"))
    assert ok.passed == ["a", "b"] and ok.failed == []
    ok.raise_on_failure()
    ok.raise_on_failure(["a", "b"])
    with pytest.raises(AssertionError, match="cocotb test.s. c did not pass on verilator"):
        ok.raise_on_failure(["a", "c"])
    with pytest.raises(AssertionError, match="wormhole did not pass"):
        ok.raise_on_failure(["wormhole"])
    bad = results(("a", ""), ("b", '<failure message="flit 3 lost"/>'),
                  ("e", "<error>Traceback: boom</error>"))
    assert bad.passed == ["a"] and bad.failed == ["b", "e"]
    with pytest.raises(AssertionError, match=r"2 cocotb test\(s\) failed on verilator:\n"
                                             r"  b: flit 3 lost\n  e: Traceback: boom"):
        bad.raise_on_failure()
    with pytest.raises(AssertionError, match="no cocotb test ran on verilator"):
        results(("c", "<skipped/>")).raise_on_failure()


def _make_output(tmp_path, makefile: str, env: dict) -> str:
    """Run ``make -s`` on the Makefile text `makefile` with environment `env`; its stdout."""
    (tmp_path / "Makefile").write_text(makefile)
    return subprocess.run(["make", "-s", "-C", str(tmp_path)], env=env, capture_output=True,
                          text=True, check=True).stdout


def test_make_variables_with_spaces_reach_make_whole(tmp_path):
    """A C++ optimisation of several flags (``--cxx-opt "-O3 -march=native"``) reaches make
    as one variable: unescaped in ``$MAKEFLAGS``, make took ``-march=native`` as its own
    options (``-r`` among them: no built-in rules) and the Verilator build made nothing."""
    env = toolchain.verilator_environment(dict(os.environ, MAKEFLAGS=""),
                                          cxx_opt="-O3 -march=native")
    out = _make_output(tmp_path, "all:\n\t@echo '[$(OPT_FAST)]' '[$(CFG_CXXFLAGS_STD)]'\n", env)
    assert out.strip() == "[-O3 -march=native] [-std=c++20]"
    assert toolchain.make_assignments({"A": "x y", "B": ""}) == "A=x\\ y B="


@pytest.mark.parametrize("value", ["-O3\t-march=native", "-O3 -Wl,-rpath,$ORIGIN",
                                   "a\\b x\\", "-DA=1 -DB==2  #%", ""])
def test_make_assignments_reach_make_as_given(tmp_path, value):
    """Tabs, ``$`` and backslashes (a trailing one too) reach make unchanged, and the next
    variable intact: make's own escapes (``$$``, a backslash before blanks and backslashes)."""
    env = dict(os.environ, MAKEFLAGS=toolchain.make_assignments({"A": value, "B": "-O1"}))
    out = _make_output(tmp_path, "$(info A=[$(value A)])\n$(info B=[$(value B)])\nall: ;\n", env)
    assert out.splitlines()[:2] == [f"A=[{value}]", "B=[-O1]"]
