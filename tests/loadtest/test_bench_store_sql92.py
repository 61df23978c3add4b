"""The store benchmark's sql92 section runs and reports the per-message cost (no timing is asserted)."""

from loadtest.bench_store import SECTIONS, bench_sql92


def test_sql92_section_reports_cost_per_message(tmp_path):
    assert "sql92" in SECTIONS
    out = bench_sql92(str(tmp_path / "store"), 600)
    for name in ("simple", "compound"):
        r = out[name]
        assert r["evaluate_ns"] > 0 and r["entry_ns"] > 0 and r["get_messages_scanned_per_s"] > 0
    assert out["simple"]["matched"] == sum(1 for i in range(600) if i % 60 > 30)
