"""A full disk under a running ``mqgate serve`` (issue 17): clear answers, nothing lost, service comes back.

The data directory is a size-limited tmpfs the test mounts (we run as root;
``mount -t tmpfs -o size=...``), unmounted in a finally. A filler file takes
all but a little of it; SYNC_FLUSH native sends (PyPI ``rocketmq``, the C++
client) then fill the rest. Once the store cannot get a new segment: native
sends fail (the answer is SERVICE_NOT_AVAILABLE with RocketMQ's "the
broker's disk is full" wording, read with our Python SDK: the C++ client
retries and then reports only "No route info"), MQTT 5 publishers get a PUBACK with an
error reason code and a reason string, and the server keeps serving. Every
acknowledged message is read back. Deleting the filler brings sends back
without a restart; meanwhile the timer service cannot file a timer (its
100 MB timer log never fits this disk), says so and tries again every
second, the process staying up, with not one block left too (its
checkpoint refused by the disk: tests/core/test_timers.py). ``diskMaxUsedSpaceRatio`` is 99 here: the forced
retention above it is another policy (it deletes the oldest segments).

The EIO tests run a thin-provisioned device out of space under the broker,
with ``warmMapedFileEnable`` off (the default) and on.
"""

from __future__ import annotations

import base64
import errno
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from rocketmq.client import Message as CppMessage
from rocketmq.client import Producer, PullConsumer, SendStatus as CppStatus
from rocketmq.exceptions import ProducerSendSyncFailed

from .conftest import Client
from core.client import MQBrokerError, MQClientError, open_producer
from core.client import Message as PyMessage
from core.remoting import ResponseCode
from gateway.mqtt import PubAck
from serve_process import ServeProcess, free_port

MIB = 1 << 20
SEGMENT = MIB


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.fail(f"mount -t tmpfs is not permitted here: {r.stderr.strip()} (use tests/support/faults.py "
                    f"max_file_size instead)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _body(i: int) -> bytes:
    # base64 of random bytes: no NUL (the C++ client's bodies are C strings), and
    # it zips poorly (the client compresses bodies over 4 KiB)
    return b"%06d:" % i + base64.b64encode(random.Random(i).randbytes(6000))


def _send_until_refused(namesrv: str, topic: str, start: int, limit: int) -> tuple[list[int], str]:
    """Native SYNC sends until one fails: (acknowledged sequence numbers, the error text)."""
    p = Producer("full-disk-pg")
    p.set_namesrv_addr(namesrv)
    p.start()
    acked = []
    try:
        for i in range(start, start + limit):
            m = CppMessage(topic)
            m.set_body(_body(i))
            try:
                r = p.send_sync(m)
            except ProducerSendSyncFailed as e:
                return acked, str(e)
            if r.status == CppStatus.OK:
                acked.append(i)
        return acked, ""
    finally:
        p.shutdown()


def _read_all(namesrv: str, topic: str) -> set[int]:
    """Sequence numbers of every message of ``topic``, pulled from offset 0 (C++ client)."""
    c = PullConsumer("full-disk-cg")
    c.offset_table = {}  # the binding keeps offsets in a class attribute: start from 0 each time
    c.set_namesrv_addr(namesrv)
    c.start()
    try:
        return {int(m.body.split(b":")[0]) for m in c.pull(topic, "*", 32)}
    finally:
        c.shutdown()


async def test_full_disk_answers_clearly_keeps_acked_data_and_recovers(small_disk, tmp_path):
    data = small_disk
    cfg = tmp_path / "full.toml"
    cfg.write_text(f"[broker]\nmappedFileSizeCommitLog = {SEGMENT}\nmappedFileSizeConsumeQueue = 60000\n"
                   "maxHashSlotNum = 1000\nmaxIndexNum = 4000\ndiskMaxUsedSpaceRatio = 99\nflushDiskType = \"SYNC_FLUSH\"\n"
                   "[mqtt]\nsysInterval = 0\n")
    port, ns_port = free_port(), free_port()
    server = ServeProcess(data, "--config", str(cfg), "--mqtt-port", str(port), "--ws-port", "0",
                          "--broker-port", str(free_port()), "--namesrv-port", str(ns_port)).start()
    namesrv = f"127.0.0.1:{ns_port}"
    topic = "FullDisk"
    try:
        made = subprocess.run([sys.executable, "-m", "gateway", "admin", "topic", "create", topic, "--queues", "2",
                               "--namesrv", namesrv], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        pub, _ = await Client.connect(port, "dev-pub", version=5)
        await pub.publish("fd/warmup", b"x", qos=1)  # topic fd, its queues and the meta topic exist before
        assert (await pub.expect(PubAck)).reason_code == 0
        # a timer to file: its timer log (100 MB) never fits this disk, so from here on the
        # timer service says it cannot file it and tries again every second
        await pub.publish("$delayed/3600/fd/later", b"t", qos=1)
        assert (await pub.expect(PubAck)).reason_code == 0
        acked, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 0, 5)
        assert len(acked) == 5 and not err, err
        filler = data / "filler"
        with open(filler, "wb") as f:
            f.write(bytes(max(0, _free(data) - 3 * SEGMENT)))
        more, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 5, 2000)
        acked += more
        assert err, f"the disk never filled: {len(more)} acked, {_free(data)} bytes free"
        cpp_refusal = err
        # The C++ client retries a refused send and then says only "No route info of this
        # topic"; the answer on the wire, as our Python SDK shows it:
        async with open_producer(namesrv, "full-disk-py") as producer:
            with pytest.raises(MQClientError) as refused:
                await producer.send(PyMessage(topic, _body(99_999)))
        answer = refused.value.__cause__  # the last attempt's answer (the SDK retries this code, as Java does)
        assert isinstance(answer, MQBrokerError), refused.value
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer
        assert "the broker's disk is full" in answer.remark, answer.remark
        # MQTT 5: an error reason code with a reason string, not silence.
        await pub.publish("fd/after", b"y" * 8000, qos=1)
        ack = await pub.expect(PubAck)
        assert ack.reason_code >= 0x80, ack
        assert "disk" in (ack.reason_string or "").lower(), ack
        # Not one block left: the timer service goes on trying, and saying so (ENOSPC out of
        # its task used to end the process).
        last = data / "filler-last"
        fd = os.open(last, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        deadline = time.monotonic() + 10
        said = "cannot file 1 timer(s) in the timer log"
        tries = _since(server).count(said)
        assert tries >= 1, _since(server)[-3000:]
        while _since(server).count(said) < tries + 2:
            assert server.proc.poll() is None, _since(server)[-3000:]
            assert time.monotonic() < deadline, "the timer service stopped trying on a full disk: " + _since(server)[-2500:]
            await trio.sleep(0.05)
        last.unlink()
        # Everything acknowledged is there.
        seen = await trio.to_thread.run_sync(_read_all, namesrv, topic)
        assert set(acked) <= seen, sorted(set(acked) - seen)[:10]
        # Space comes back: service resumes by itself.
        filler.unlink()
        deadline = time.monotonic() + 20
        while True:
            again, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 10_000, 3)
            if len(again) == 3:
                break
            assert time.monotonic() < deadline, f"sends still refused after the space came back: {err}"
            await trio.sleep(0.2)
        await pub.publish("fd/back", b"ok", qos=1)
        assert (await pub.expect(PubAck)).reason_code == 0
        seen = await trio.to_thread.run_sync(_read_all, namesrv, topic)
        assert set(acked) | set(again) <= seen
    finally:
        server.kill()
    print(f"acked before the disk filled: {len(acked)}; the C++ client's refusal: {cpp_refusal}")


@pytest.fixture
def thin_disk(tmp_path):
    """An ext4 file system on a loop device whose backing file lives on a small
    tmpfs: ext4 believes it has 96 MiB, the backing store has 40. Filling the
    tmpfs makes the kernel's write-back fail, so fsync answers a real ENOSPC
    or EIO (a thin-provisioned volume running out). (mountpoint, backing dir,
    image)."""
    back, mnt = tmp_path / "back", tmp_path / "ext4"
    back.mkdir()
    mnt.mkdir()
    img = back / "img"
    loop = None

    def run(*cmd: str) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            pytest.fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
        return r.stdout.strip()

    run("mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(back))
    try:
        run("truncate", "-s", "96M", str(img))
        run("mkfs.ext4", "-q", str(img))
        loop = run("losetup", "-f", "--show", str(img))
        run("mount", loop, str(mnt))
        yield mnt, back, img, loop
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False)
        subprocess.run(["umount", "-l", str(back)], check=False)


def _thin_disk_server(cfg: Path, segment: int, broker_extra: str = "") -> tuple[tuple, str]:
    """(``mqgate serve`` arguments, name server address) of a SYNC_FLUSH server
    for the thin device: its config written to ``cfg``, its ports free."""
    cfg.write_text(f"[broker]\nmappedFileSizeCommitLog = {segment}\nmappedFileSizeConsumeQueue = 60000\n"
                   "maxHashSlotNum = 1000\nmaxIndexNum = 4000\ndiskMaxUsedSpaceRatio = 99\n"
                   f"flushDiskType = \"SYNC_FLUSH\"\n{broker_extra}[mqtt]\nsysInterval = 0\n")
    ns_port = free_port()
    args = ("--config", str(cfg), "--mqtt-port", "0", "--ws-port", "0", "--broker-port", str(free_port()),
            "--namesrv-port", str(ns_port))
    return args, f"127.0.0.1:{ns_port}"


async def test_an_fsync_error_is_reported_and_nothing_unflushed_is_acknowledged(thin_disk, tmp_path):
    """EIO/ENOSPC from fdatasync (a real one, see ``thin_disk``): the broker
    logs it and stops (``core.broker.flush``: it never acknowledges data it
    could not flush, and after a failed fsync the page cache is not to be
    trusted); sends in flight are not acknowledged. With space back and the
    file system checked, the restarted broker holds every message acknowledged
    while the device was healthy (see the note at the end for the others)."""
    mnt, back, img, loop = thin_disk
    data = mnt  # the store at the file system's root, its log (next to it) outside
    args, namesrv = _thin_disk_server(tmp_path / "eio.toml", 4 * SEGMENT)
    topic = "EioTopic"
    server = ServeProcess(data, *args).start()
    try:
        made = subprocess.run([sys.executable, "-m", "gateway", "admin", "topic", "create", topic, "--queues", "2",
                               "--namesrv", namesrv], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        acked, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 0, 20)
        assert len(acked) == 20 and not err, err
        healthy = list(acked)
        filler = _fill_backing_store(back)  # the backing store is full; ext4 does not know
        more, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 20, 400)
        acked += more
        assert err, f"the writes never failed ({len(more)} acked)"
        deadline = time.monotonic() + 30
        while server.proc.poll() is None:
            assert time.monotonic() < deadline, "the broker went on after a failed fsync"
            await trio.sleep(0.1)
        out = _since(server)
        assert "commit log flush failed" in out, out[-3000:]
        assert "Input/output error" in out or "No space left on device" in out, out[-3000:]
        assert server.proc.returncode != 0
    finally:
        server.kill()
    seen = await _repair_and_read(thin_disk, filler, args, namesrv, topic)
    assert set(healthy) <= seen, sorted(set(healthy) - seen)[:10]
    # Acknowledged while the device was already failing, missing after the restart:
    # seen in about half the runs (one message, the last acknowledged before the
    # failed fsync; with or without e2fsck). Its last pages read as zeros on the
    # device while ext4 marks their blocks written (docs/RELIABILITY.md: narrowed,
    # not explained), so reported here rather than asserted. With
    # warmMapedFileEnable it does not happen (the next test asserts it).
    lost = sorted(set(acked) - seen)
    print(f"acked before the fsync error: {len(acked)} ({len(healthy)} before the device filled); "
          f"missing after fsck and restart: {lost}; the C++ client saw: {err}")


def _fill_backing_store(back: Path) -> Path:
    """A file that leaves about 256 KiB of the thin device's backing store free.
    Written in steps: ext4's write-back (a segment being made ahead, its lazy
    inode-table init) takes space meanwhile, and ENOSPC here means full already."""
    filler = back / "filler"
    step = bytes(1 << 20)
    with open(filler, "wb", buffering=0) as f:
        try:
            while (left := _free(back) - 256 * 1024) > 0:
                f.write(step[:left])
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return filler


async def _repair_and_read(thin_disk, filler: Path, args: tuple, namesrv: str, topic: str) -> set[int]:
    """The operator's part: space back, the file system checked, the broker
    started again; the sequence numbers it serves."""
    mnt, back, img, loop = thin_disk
    filler.unlink()
    subprocess.run(["umount", str(mnt)], check=False)
    subprocess.run(["e2fsck", "-fy", str(img)], capture_output=True)
    assert subprocess.run(["mount", loop, str(mnt)]).returncode == 0
    server = ServeProcess(mnt, *args).start()
    try:
        return await trio.to_thread.run_sync(_read_all, namesrv, topic)
    finally:
        server.kill()


async def test_with_warm_segments_every_acknowledged_message_survives_the_device_running_out(thin_disk, tmp_path):
    """``warmMapedFileEnable``: segments are written with zeros and synced
    before use, so the device refuses the *next segment* (the put that needs
    it is refused, or a later sync of other files stops the broker), never a
    block of an acknowledged message. After the repair every acknowledged
    message is there, the last ones before the device ran out included
    (without the key, the test above loses one in about half the runs)."""
    mnt, back, img, loop = thin_disk
    args, namesrv = _thin_disk_server(tmp_path / "warm.toml", SEGMENT, "warmMapedFileEnable = true\n")
    topic = "WarmTopic"  # created by the first send (autoCreateTopicEnable)
    server = ServeProcess(mnt, *args).start()
    try:
        acked, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 0, 20)
        assert len(acked) == 20 and not err, err
        filler = _fill_backing_store(back)  # the backing store is full; ext4 does not know
        more, err = await trio.to_thread.run_sync(_send_until_refused, namesrv, topic, 20, 1000)
        acked += more
        assert err, f"the writes never failed ({len(more)} acked)"
        out = _since(server)
        refused = "cannot create a store file" in out
        stopped = "commit log flush failed" in out
        assert refused or stopped, out[-3000:]
        errors = [line.strip() for line in out.splitlines() if "Errno" in line]
        why = errors[:1] + errors[-1:]  # the first error (the cause) and the last
    finally:
        server.kill()
    seen = await _repair_and_read(thin_disk, filler, args, namesrv, topic)
    lost = sorted(set(acked) - seen)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages missing: {lost[:10]}"
    print(f"warm: {len(acked)} acked, all there after the restart; "
          f"{'a new segment refused' if refused else ''}{' and ' if refused and stopped else ''}"
          f"{'a failed flush stopped the broker' if stopped else ''} ({why}); the C++ client saw: {err}")


def _since(server: ServeProcess) -> str:
    return server.output()[server._start_at:]
