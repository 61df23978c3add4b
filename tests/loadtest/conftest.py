"""Brokers for the load-generator tests: Mosquitto and amqtt on free ports."""

import pytest

from loadtest import Broker
from loadtest.brokers import available


def _broker(name):
    if not available(name):
        pytest.skip(f"{name} is not installed (make system-deps / pip install amqtt)")
    with Broker(name) as broker:
        yield broker


@pytest.fixture(scope="session")
def mosquitto():
    yield from _broker("mosquitto")


@pytest.fixture(scope="session")
def amqtt():
    yield from _broker("amqtt")
