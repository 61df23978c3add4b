"""The gRPC endpoint: grpcio's server, its calls carried into trio.

Why grpcio: it is the gRPC implementation the 5.x clients themselves use
(rocketmq-python-client is built on it), it is kept current with protobuf,
and it speaks every HTTP/2 detail those clients expect (keepalives, flow
control, stream cancellation). purerpc (native anyio/trio) was the other
candidate; its last release is 0.8.0 of 2022 and it is not kept up with
grpcio and protobuf releases, so a client-side change would find us alone.
The price is threads (below), which ARCHITECTURE.md's "no bare threads"
otherwise avoids: they are grpcio's pools, owned and stopped here.

How the bridge works: grpcio runs handlers on its own worker threads. Each
handler hands the decoded request to the trio loop with
``trio.from_thread.run`` (through the loop's token) and returns what the
`MessagingService` coroutine returns. All broker state is touched on the trio
thread only; the worker threads hold no state.

Rules kept here:
- ``started`` reports the bound port after the server accepts connections;
  a port that cannot be bound is a one-line `OSError` naming it.
- A ReceiveMessage long poll occupies a worker thread for its length, and a
  Telemetry stream one for the client's life (plus one reader thread of a
  second pool): the pools have ``max_workers`` threads each (no
  configuration key yet: 256) and calls beyond that wait in grpcio's queue.
- The transaction checker's view of producers is widened once, at start, to
  the 5.x producers of the half's topic (their Telemetry streams).
- A handler that fails answers INTERNAL_SERVER_ERROR with one line and is
  logged; the server keeps serving.
- With ``tls`` the port speaks TLS only; with an ACL each call passes the
  access check (`core.proxy.auth`) on its worker thread before it reaches
  the trio loop, and a refused call is answered there.
- Stopping: the service is closed first (waiting receives answer at once),
  then the gRPC server stops with a short grace.
"""

from __future__ import annotations

import logging
import queue
import socket
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Sequence

import grpc
import trio

from core.client.api import ClientApi
from core.remoting.client import open_remoting_client

from . import pb
from .auth import AccessCheck
from .routing import CALL_TIMEOUT_S, ClusterRoutes
from .service import MessagingService, TelemetryChannel
from .wire import status

log = logging.getLogger("mqgate.proxy")

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
_END = object()  # a Telemetry stream's queue: the client's side ended
MAX_WORKERS = 256
STOP_GRACE_S = 1.0


def _one_line(record: logging.LogRecord) -> bool:
    """grpcio logs a request it cannot decode with a traceback: the peer's fault,
    so one line (the error's own text) is enough."""
    if record.exc_info and record.exc_info[1] is not None:
        record.msg = f"{record.getMessage()} {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        record.args = ()
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


logging.getLogger("grpc._common").addFilter(_one_line)


def _client_id(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return context.peer()


class _Bridge:
    """The sync grpcio handlers, each one call into the trio loop."""

    def __init__(self, service: MessagingService, token: trio.lowlevel.TrioToken, readers: ThreadPoolExecutor,
                 access: AccessCheck) -> None:
        self.service = service
        self.token = token
        self.readers = readers
        self.access = access

    def _refusal(self, method: str, request, context) -> pb.Status | None:
        """The access check (`core.proxy.auth`), on this worker thread: it reads no broker state."""
        return self.access.refusal(method, request, context.invocation_metadata(), context.peer())

    def _run(self, fn, *args, failed):
        try:
            return trio.from_thread.run(fn, *args, trio_token=self.token)
        except trio.RunFinishedError:
            return failed(status(pb.INTERNAL_SERVER_ERROR, "the broker is stopping"))
        except Exception as e:  # a bug of ours: answer, log, keep serving
            log.exception("gRPC %s failed", getattr(fn, "__name__", fn))
            return failed(status(pb.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}".splitlines()[0]))

    def unary(self, method: str, name: str, response_cls, with_client: bool = False):
        fn = getattr(self.service, name)

        def handler(request, context):
            refused = self._refusal(method, request, context)
            if refused is not None:
                return response_cls(status=refused)
            args = (request, _client_id(context)) if with_client else (request,)
            return self._run(fn, *args, failed=lambda st: response_cls(status=st))
        return handler

    def receive(self, request, context):
        refused = self._refusal("ReceiveMessage", request, context)
        if refused is not None:
            yield pb.ReceiveMessageResponse(status=refused)
            return
        left = context.time_remaining()
        answers = self._run(self.service.receive_message, request, left, _client_id(context),
                            failed=lambda st: [pb.ReceiveMessageResponse(status=st)])
        yield from answers

    def telemetry(self, requests, context):
        """Answers to the client's commands and the broker's own (transaction checks)
        share one queue; a reader on the readers' pool feeds it the answers."""
        refused = self._refusal("Telemetry", None, context)
        if refused is not None:
            yield pb.TelemetryCommand(status=refused)
            return
        client_id = _client_id(context)
        out: queue.SimpleQueue = queue.SimpleQueue()
        channel = TelemetryChannel(out.put)
        self._run_sync(self.service.attach, client_id, channel)
        self.readers.submit(self._read_telemetry, requests, client_id, out)
        try:
            while (item := out.get()) is not _END:
                yield item
        finally:
            self._run_sync(self.service.detach, client_id, channel)

    def _read_telemetry(self, requests, client_id: str, out: queue.SimpleQueue) -> None:
        try:
            for cmd in requests:
                answer = self._run(self.service.telemetry, cmd, client_id,
                                   failed=lambda st: pb.TelemetryCommand(status=st))
                if answer is not None:
                    out.put(answer)
        except grpc.RpcError:
            pass  # the client went away or the server stops: the stream ends either way
        finally:
            out.put(_END)

    def _run_sync(self, fn, *args) -> None:
        try:
            trio.from_thread.run_sync(fn, *args, trio_token=self.token)
        except trio.RunFinishedError:
            pass

    def handlers(self) -> grpc.GenericRpcHandler:
        def unary(method, name, req_cls, resp_cls, with_client=False):
            return grpc.unary_unary_rpc_method_handler(
                self.unary(method, name, resp_cls, with_client), request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString)

        def plain(method, name, with_client=False):  # the request and response types are named after the method
            return unary(method, name, getattr(pb, method + "Request"), getattr(pb, method + "Response"), with_client)

        return grpc.method_handlers_generic_handler(SERVICE_NAME, {
            "QueryRoute": plain("QueryRoute", "query_route"),
            "Heartbeat": plain("Heartbeat", "heartbeat", True),
            "SendMessage": plain("SendMessage", "send_message", True),
            "QueryAssignment": plain("QueryAssignment", "query_assignment"),
            "AckMessage": plain("AckMessage", "ack_message"),
            "ForwardMessageToDeadLetterQueue": plain("ForwardMessageToDeadLetterQueue", "forward_to_dlq"),
            "EndTransaction": plain("EndTransaction", "end_transaction"),
            "ChangeInvisibleDuration": plain("ChangeInvisibleDuration", "change_invisible_duration"),
            "NotifyClientTermination": plain("NotifyClientTermination", "notify_client_termination", True),
            "SyncLiteSubscription": plain("SyncLiteSubscription", "sync_lite_subscription", True),
            "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
                self.receive, request_deserializer=pb.ReceiveMessageRequest.FromString,
                response_serializer=pb.ReceiveMessageResponse.SerializeToString),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                self.telemetry, request_deserializer=pb.TelemetryCommand.FromString,
                response_serializer=pb.TelemetryCommand.SerializeToString),
        })


async def run_grpc(broker, host: str, port: int, *, transactions=None, namesrv_addrs: Sequence[str] = (),
                   tls: tuple[bytes, bytes] | None = None, access: AccessCheck | None = None,
                   max_workers: int = MAX_WORKERS, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve RocketMQ 5's MessagingService for ``broker`` on ``host:port`` (0 = any free
    port) until cancelled; ``started`` gets the bound port.

    ``transactions``: the broker's `TransactionService`; its checks then also
    reach 5.x producers, through their Telemetry streams. ``namesrv_addrs``:
    the name servers whose routes name the other broker groups (none: routes
    name this broker alone). ``tls``: (private key, certificate chain) PEM
    bytes, the port then speaks TLS only. ``access``: with an ACL in it, every
    call must carry an access-key signature its accounts accept
    (`core.proxy.auth`); its ``acl`` may be replaced while serving."""
    _probe(host, port)
    async with open_remoting_client() as remoting:
        routes = ClusterRoutes(ClientApi(remoting, CALL_TIMEOUT_S), list(namesrv_addrs), broker.config.broker_name)
        await _serve(broker, host, port, transactions, routes, tls, access or AccessCheck(None), max_workers,
                     task_status)


async def _serve(broker, host: str, port: int, transactions, routes: ClusterRoutes, tls, access: AccessCheck,
                 max_workers: int, task_status) -> None:
    token = trio.lowlevel.current_trio_token()
    executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc")
    readers = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc-telemetry")
    server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
    service = MessagingService(broker, host, port, transactions, routes)
    if transactions is not None:
        remoting_producers = transactions.producer_channels
        transactions.producer_channels = lambda group: [*remoting_producers(group), *service.producer_channels(group)]
    server.add_generic_rpc_handlers((_Bridge(service, token, readers, access).handlers(),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = (server.add_secure_port(address, grpc.ssl_server_credentials([tls])) if tls is not None
                 else server.add_insecure_port(address))
    except RuntimeError:
        bound = 0
    if not bound:
        executor.shutdown(wait=False)
        readers.shutdown(wait=False)
        raise OSError(f"[proxy] grpcPort {port}: cannot listen on {host}:{port} (in use, or not an address of "
                      f"this machine); choose another port or 0 to turn gRPC off")
    service.port = broker.grpc_port = bound
    await service.consumption.load()
    server.start()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.consumption.save_every, broker.config.flush_consumer_offset_interval / 1000)
            task_status.started(bound)
            await trio.sleep_forever()
    finally:
        broker.grpc_port = 0
        service.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(partial(_stop, server, executor, readers))
            try:
                await service.consumption.save()  # after the last call: nothing changes it any more
            except OSError as e:
                log.warning("saving the pop state at shutdown failed: %s", e)


def _probe(host: str, port: int) -> None:
    """Bind ``host:port`` once with a plain socket: grpcio only says that binding failed,
    this says why (an `OSError` with its errno, naming the port)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise OSError(e.errno, f"gRPC port {port} on {host}: {e.strerror}") from None


def _stop(server: grpc.Server, *pools: ThreadPoolExecutor) -> None:
    server.stop(STOP_GRACE_S).wait()
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)
