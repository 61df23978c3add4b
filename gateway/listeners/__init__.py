"""gateway/listeners: TCP, TLS, WebSocket and WSS listeners on trio.

Every listener hands the server the same thing: a connected
``trio.abc.Stream`` that carries MQTT bytes (TLS and WebSocket framing
already removed) and a ``ConnectionInfo``::

    async def handler(stream: trio.abc.Stream, info: ConnectionInfo) -> None: ...

    specs = listener_specs_from_dict(cfg.mqtt, host=cfg.host, port=cfg.mqtt_port,
                                     ws_port=cfg.ws_port)
    stats = ListenerStats()
    ports = await nursery.start(partial(serve_listeners, specs, handler,
                                        max_connections=limits.max_connections,
                                        stats=stats))
    # ports == {"tcp": 1883, "ws": 8083}   (spec.name -> bound port)

Rules kept here:
- Port 0 in a spec means the listener is off. ``ephemeral=True`` binds an
  OS-chosen port instead (tests); ``started()`` reports every bound port.
- TCP sockets have TCP_NODELAY (trio sets it on every SocketStream).
- The TLS and WebSocket handshakes together are bounded by the spec's
  ``handshake_timeout`` (default 10 s); a failed or slow handshake is logged,
  counted (``stats.handshake_failures``) and closed, and never reaches the
  handler.
- Over ``max_connections`` (default 100000, over all listeners of one
  ``serve_listeners``) a new socket is closed at once, counted
  (``stats.refused``) and logged (at most one line a second).
- ``max_connection_rate`` (default 0, none): at most that many accepts a
  second over all listeners, in bursts of one second's worth; the others
  wait in the kernel's listen backlog, unaccepted.
- Whatever a connection does (handshake error, handler exception), the
  listener goes on serving; the stream is closed when the handler returns,
  within 2 s (then forcefully). The handler need not close it. (A ``plain``
  starter, for plain TCP, closes its stream itself: ``serve_listeners``.)
- WebSocket: path ``/mqtt`` (query string ignored; any other path: 404);
  the client must offer subprotocol ``mqtt`` or ``mqttv3.1`` (the first of
  ``spec.ws_subprotocols`` it offers is agreed; none: 400). No extensions.
- TLS: TLS 1.2 or later. With ``caFile`` a client certificate is asked for
  and verified; ``requireCertificate`` refuses clients without one. The
  verified subject is ``info.certificate`` (``CertIdentity``).
- Logs go to the ``mqgate.gateway`` logger: one line per endpoint at start.

``[mqtt]`` keys read by ``listener_specs_from_dict`` (``LISTENER_KEYS``):

==================  ==========  ===============================================
key                 default     meaning
==================  ==========  ===============================================
port                1883        MQTT over TCP (0 = off)
wsPort              8083        MQTT over WebSocket (0 = off)
tlsPort             8883        MQTT over TLS; started only if certFile is set
                                (set without certFile: an error)
wssPort             8084        MQTT over WebSocket over TLS; only with certFile
wsPath              "/mqtt"     the WebSocket endpoint
certFile            ""          server certificate chain (PEM)
keyFile             ""          its private key (PEM; "" = inside certFile)
caFile              ""          CA for client certificates ("" = none asked)
requireCertificate  false       refuse TLS clients without a valid certificate
handshakeTimeout    10.0        seconds for the TLS + WebSocket handshakes
==================  ==========  ===============================================
"""

from gateway.listeners._serve import DEFAULT_MAX_CONNECTIONS, Handler, PlainStarter, serve_listeners
from gateway.listeners._spec import (DEFAULT_PORTS, LISTENER_KEYS, CertIdentity, ConnectionInfo,
                                     ListenerSpec, ListenerStats, TlsConfig, listener_specs_from_dict)
from gateway.listeners._websocket import WebSocketStream

__all__ = [
    "DEFAULT_MAX_CONNECTIONS", "DEFAULT_PORTS", "LISTENER_KEYS", "CertIdentity", "ConnectionInfo",
    "Handler", "ListenerSpec", "ListenerStats", "PlainStarter", "TlsConfig", "WebSocketStream",
    "listener_specs_from_dict", "serve_listeners",
]
