"""A peer that resets its connection (RST, as a broker restarting in another
role does) fails the calls on that connection with RemotingConnectionError;
the client, its nursery and its other connections go on (trio wraps the
reader's error in an ExceptionGroup: it used to escape and end the client)."""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from core.remoting import RemotingCommand, RequestCode
from core.remoting.client import RemotingConnectionError, open_remoting_client


async def resetting_server(task_status=trio.TASK_STATUS_IGNORED):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def handle(stream: trio.SocketStream):
        await stream.receive_some(65536)  # the request arrives; no answer, a reset instead
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        stream.socket.close()

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def test_a_reset_fails_its_calls_and_the_client_goes_on(tmp_path):
    async with trio.open_nursery() as nursery:
        port = await nursery.start(resetting_server)
        async with open_remoting_client() as client:
            for _ in range(3):  # a new connection each time, each reset
                with pytest.raises(RemotingConnectionError):
                    await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(RequestCode.HEART_BEAT), timeout=3)
        nursery.cancel_scope.cancel()
