"""The cached Verilog generation of ``chipotle.sim.flow``."""

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import flow


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
