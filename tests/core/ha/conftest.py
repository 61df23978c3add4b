"""A real etcd per test that asks for one (`etcd` fixture)."""

import pytest

from etcd_process import EtcdProcess


@pytest.fixture
def etcd(tmp_path):
    proc = EtcdProcess(tmp_path / "etcd").start()
    yield proc
    proc.kill()
