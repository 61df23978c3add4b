"""Brokers for the load-generator tests: Mosquitto, amqtt and ours on free ports.

`make test` installs every one of them; a missing broker fails the tests that
need it (with the command that installs it) instead of skipping them.
"""

import pytest

from loadtest import Broker
from loadtest.brokers import available


def _broker(name):
    assert available(name), f"{name} is not installed: run `make install-dev` (apt mosquitto, pip amqtt)"
    with Broker(name) as broker:
        yield broker


@pytest.fixture(scope="session")
def mosquitto():
    yield from _broker("mosquitto")


@pytest.fixture(scope="session")
def amqtt():
    yield from _broker("amqtt")


@pytest.fixture(scope="session")
def ours():
    """`mqgate serve` as a separate process, as `make bench` runs it."""
    yield from _broker("ours")
