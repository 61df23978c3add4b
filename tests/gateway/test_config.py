"""The configuration file and flag precedence of `mqgate serve`."""

from pathlib import Path

import pytest

from gateway.config import ConfigError, build_serve_config, load_file


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mqgate.toml"
    p.write_text(text)
    return p


def test_defaults_without_file():
    cfg = build_serve_config(None, {})
    assert (cfg.mqtt_port, cfg.ws_port, cfg.namesrv_port, cfg.broker_port) == (1883, 8083, 9876, 10911)
    assert cfg.data_dir == Path("./data")
    assert cfg.flush_disk_type == "ASYNC_FLUSH"


def test_file_then_flags(tmp_path):
    path = write(tmp_path, """
dataDir = "/srv/mq"
[broker]
listenPort = 20911
flushDiskType = "SYNC_FLUSH"
brokerName = "b1"
[namesrv]
listenPort = 0
[mqtt]
port = 2883
wsPort = 0
""")
    cfg = build_serve_config(load_file(path), {})
    assert cfg.data_dir == Path("/srv/mq")
    assert (cfg.mqtt_port, cfg.ws_port, cfg.namesrv_port, cfg.broker_port) == (2883, 0, 0, 20911)
    assert cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.broker == {"brokerName": "b1"}  # ports and flush are taken out of the table
    cfg = build_serve_config(load_file(path), {"mqtt_port": 0, "flush": "async", "data_dir": str(tmp_path)})
    assert cfg.mqtt_port == 0 and cfg.flush_disk_type == "ASYNC_FLUSH" and cfg.data_dir == tmp_path


@pytest.mark.parametrize("text, words", [
    ("dataDirr = 'x'", "dataDirr"),
    ("[mqtt]\nport = 70000", "[mqtt] port"),
    ("[broker]\nflushDiskType = 'SOMETIMES'", "flushDiskType"),
    ("broker = 3", "[broker] must be a table"),
    ("this is not toml", "mqgate.toml"),
])
def test_bad_files_say_what_is_wrong(tmp_path, text, words):
    with pytest.raises(ConfigError, match=None) as e:
        build_serve_config(load_file(write(tmp_path, text)), {})
    assert words in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_file(tmp_path / "nope.toml")


def test_namesrv_addresses_from_flag():
    cfg = build_serve_config(None, {"namesrv": "127.0.0.1:9876;127.0.0.1:9877"})
    assert cfg.namesrv_addrs == ["127.0.0.1:9876", "127.0.0.1:9877"]


# --------------------------------------------------------------- [broker] timer keys

def timer_config(tmp_path, text):
    from gateway.serve import broker_configs

    return broker_configs(build_serve_config(load_file(write(tmp_path, "[broker]\n" + text)), {"data_dir": str(tmp_path)}))[2]


@pytest.mark.parametrize("text, words", [
    ("timerWheelEnable = 'yes'", ["timerWheelEnable", "true or false", "'yes'"]),
    ("timerWheelEnable = 1", ["timerWheelEnable", "true or false", "1"]),
    ("timerPrecisionMs = '1000'", ["timerPrecisionMs", "100, 200, 500 or 1000", "'1000'"]),
    ("timerPrecisionMs = 0", ["timerPrecisionMs", ">= 100", "not 0"]),
    ("timerPrecisionMs = 50", ["timerPrecisionMs", ">= 100", "not 50"]),
    ("timerPrecisionMs = 1000.0", ["timerPrecisionMs", "integer", "1000.0"]),
    ("timerMaxDelaySec = '10'", ["timerMaxDelaySec", "1..2147483", "'10'"]),
    ("timerMaxDelaySec = 3000000", ["timerMaxDelaySec", "1..2147483", "24.8 days", "not 3000000"]),
    ("timerMaxDelaySec = 0", ["timerMaxDelaySec", "1..2147483", "not 0"]),
    ("timerMaxDelaySec = true", ["timerMaxDelaySec", "1..2147483", "True"]),
    ("timerRollWindowSlot = 'x'", ["timerRollWindowSlot", "1..604740", "'x'"]),
    ("timerRollWindowSlot = 0", ["timerRollWindowSlot", "1..604740", "not 0"]),
    ("timerRollWindowSlot = 604741", ["timerRollWindowSlot", "1..604740", "604800", "not 604741"]),
])
def test_bad_timer_values_say_key_value_and_range(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        timer_config(tmp_path, text)
    assert str(e.value).startswith("[broker] ")
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_good_timer_values_reach_the_timer_config(tmp_path):
    t = timer_config(tmp_path, "timerWheelEnable = false\ntimerPrecisionMs = 200\n"
                               "timerMaxDelaySec = 2147483\ntimerRollWindowSlot = 604740\n")
    assert (t.enabled, t.precision_ms, t.max_delay_s, t.roll_window_slots) == (False, 200, 2147483, 604740)
    t = timer_config(tmp_path, "timerPrecisionMs = 300\ntimerMaxDelaySec = 1\ntimerRollWindowSlot = 1\n")
    assert (t.precision_ms, t.max_delay_s, t.roll_window_slots) == (300, 1, 1)  # 300 runs as 200 (rounded down)
    t = timer_config(tmp_path, "")
    assert (t.enabled, t.precision_ms, t.max_delay_s, t.roll_window_slots) == (True, 1000, 259200, None)


def test_the_largest_delay_accepted_fits_the_timer_log(tmp_path):
    """timerMaxDelaySec's bound is the largest whole second a signed 32-bit ms count holds;
    a timer of exactly that delay is written to and read back from a real timer log."""
    from core.store.timer_wheel import TimerWheelStore

    t = timer_config(tmp_path, "timerMaxDelaySec = 2147483\n")
    assert t.max_delay_s * 1000 <= 2**31 - 1 < (t.max_delay_s + 1) * 1000
    (tmp_path / "w").mkdir()
    wheel = TimerWheelStore(tmp_path / "w", precision_ms=t.precision_ms, slots_total=600, timerlog_file_size=1 << 16)
    try:
        slot = wheel.schedule(t.max_delay_s * 1000, 0, 1234, 100)
        (unit,) = wheel.due(slot)
        assert (unit.delayed_ms, unit.offset_py) == (t.max_delay_s * 1000, 1234)
    finally:
        wheel.close()


@pytest.mark.parametrize("key,value,words", [
    ("ownerLeaseTtl", 1, "[mqtt] ownerLeaseTtl must be a number in 2..60, not 1"),
    ("releaseWait", -1, "[mqtt] releaseWait must be a number in 0..60, not -1"),
    ("releaseWait", "2s", "[mqtt] releaseWait must be a number in 0..60, not '2s'"),
])
def test_bad_gateway_node_timings_say_key_value_and_range(key, value, words):
    from gateway.settings import GatewaySettings
    with pytest.raises(ConfigError) as e:
        GatewaySettings.from_dict({key: value})
    assert str(e.value) == words


def test_gateway_node_timings_reach_the_session_settings():
    from gateway.settings import GatewaySettings
    s = GatewaySettings.from_dict({"ownerLeaseTtl": 3, "releaseWait": 0.5}).session
    assert (s.owner_lease_ttl, s.release_wait) == (3, 0.5)
    d = GatewaySettings.from_dict({}).session
    assert (d.owner_lease_ttl, d.release_wait) == (5, 2.0)
