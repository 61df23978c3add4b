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
