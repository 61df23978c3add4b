"""The overview's rate sampler and SVG charts, without a server."""

from gateway.http.dashboard import RateSampler, svg_chart


def test_rates_are_differences_over_time_and_a_counter_reset_is_zero():
    now = [0.0]
    counters = {"received": 0}
    s = RateSampler(lambda: dict(counters), interval=5, keep=3, clock=lambda: now[0])
    for t, n in ((0, 0), (5, 50), (10, 150), (15, 100)):
        now[0], counters["received"] = t, n
        s.sample()
    assert len(s.samples) == 3  # the oldest fell off
    assert s.rate("received") == [(10, 20.0), (15, 0.0)]
    now[0], counters["received"] = 20, 150
    assert s.rate("received")[-1] == (20, 10.0)  # a sample taken now, not kept
    assert len(s.samples) == 3


def test_svg_chart_escapes_its_label_and_says_when_empty():
    empty = str(svg_chart([], "<in>"))
    assert "collecting samples" in empty and "<in>" not in empty and "&lt;in&gt;" in empty
    chart = str(svg_chart([(0, 0.0), (60, 4.0), (120, 2.0)], "Messages in", "/s"))
    assert "<polyline" in chart and "Messages in: 2/s" in chart and "peak 4<" in chart and "2 min ago" in chart
