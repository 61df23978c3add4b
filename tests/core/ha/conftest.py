"""A real etcd per test that asks for one (`etcd`), and a replication group
with its name server started (`etcd_group`, brokers added by the test)."""

import pytest

from etcd_process import EtcdProcess
from ha_group import Group


@pytest.fixture
def etcd(tmp_path):
    proc = EtcdProcess(tmp_path / "etcd").start()
    yield proc
    proc.kill()


@pytest.fixture
def etcd_group(tmp_path, etcd):
    g = Group(tmp_path)
    g.start_namesrv()
    yield g
    g.stop_all()
