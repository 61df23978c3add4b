"""The [events] table and --events-port: checked before anything starts, one line naming the key."""

import pytest

from gateway.config import ConfigError, build_serve_config
from gateway.http.events_settings import EventsSettings


def test_defaults_leave_the_event_api_off():
    cfg = build_serve_config({}, {})
    assert cfg.events_port == 0
    assert EventsSettings.from_dict(cfg.events, port=cfg.events_port) == EventsSettings()


def test_the_port_comes_from_the_table_and_the_flag_wins():
    cfg = build_serve_config({"events": {"port": 18084, "busQueues": 8}}, {})
    s = EventsSettings.from_dict(cfg.events, port=cfg.events_port)
    assert (s.port, s.bus_queues) == (18084, 8)
    assert build_serve_config({"events": {"port": 18084}}, {"events_port": 0}).events_port == 0


@pytest.mark.parametrize("table,message", [
    ({"prot": 1}, "[events] unknown key 'prot'"),
    ({"busQueues": 0}, "[events] busQueues must be a number in 1..64, not 0"),
    ({"busQueues": True}, "[events] busQueues must be a number in 1..64, not True"),
    ({"countsInterval": "5"}, "[events] countsInterval must be a number"),
    ({"host": ""}, "[events] host must be an address"),
])
def test_a_bad_key_or_value_is_one_line_naming_it(table, message):
    with pytest.raises(ConfigError) as e:
        EventsSettings.from_dict(table)
    assert str(e.value).startswith(message)


def test_a_bad_port_is_refused_by_the_file_reader():
    with pytest.raises(ConfigError, match=r"\[events\] port must be a port number"):
        build_serve_config({"events": {"port": 70000}}, {})
