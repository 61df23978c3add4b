"""core/remoting: the RocketMQ 4.x remoting codec, sans-I/O.

No trio, socket or clock imports here: bytes in, commands out, commands in,
bytes out. The trio server/client, name server and broker processors build on
this API; everything they may use is re-exported below.

Commands::

    RemotingCommand(code, language=LanguageCode.JAVA, version=CURRENT_VERSION,
                    opaque=0, flag=0, remark=None, ext_fields={}, body=b"",
                    serialize_type=SerializeType.JSON)
    RemotingCommand.request(code, ext=None, body=b"", *, opaque=0,
                            oneway=False, remark=None, serialize_type=JSON)
    cmd.make_response(code, remark=None, ext=None, body=b"")
        # flag RESPONSE, same opaque and serialize_type as the request
    cmd.put_ext(**fields)         # Python values -> Java strings, None skipped
    cmd.is_response, cmd.is_oneway
    cmd.get_str(name[, default]) / get_int / get_long
    cmd.get_bool(name[, default], cpp_compatible=False)
    ext_value(value) -> str       # True -> "true", 5 -> "5"

``get_*`` without a default raise :class:`HeaderFieldError` ("the custom
field <x> is null", or "... is not a valid int"), which a processor turns
into a SYSTEM_ERROR response; get_bool follows Java's
``Boolean.parseBoolean`` (only "true", any case), and with
``cpp_compatible=True`` also reads C++ 1.2.x's "1" as true. Use that only
where we choose to honour C++ clients (e.g. ``batch``); Java reads "1" as
false.

Frames::

    encode_frame(cmd) -> bytes                   # length word included
    encode_frame_parts(cmd) -> (prefix, body)    # frame = prefix + body
    decode_frame(data, *, max_frame_size=16 MiB) -> RemotingCommand
    dec = FrameDecoder(max_frame_size=16 MiB)
    dec.receive_data(data)     # b"" marks end of input
    for cmd in dec.frames(): ...   # every complete frame, in order
    dec.buffered, dec.at_eof

Bad length, header longer than the frame, bad JSON, unknown serialize type or
an oversized frame raise :class:`RemotingProtocolError`; the decoder then
stays failed. Close that connection only. Decoded ``ext_fields`` values are
always ``str`` (C++ numbers and "0"/"1", ali-ons JSON booleans are coerced
as fastjson would); JSON output is compact with Java's key order.

Bodies::

    encode_json(obj, *, standard: bool) -> str
        # standard=False: fastjson default, {0:"ip:port"} integer keys
        # standard=True: every key quoted, non-ASCII \\u-escaped
    decode_json(text) -> Any
        # also reads {0:"a"} (int keys) and {{"brokerName":"b",...}:1}
        # (object keys -> tuple of (name, value) pairs sorted by name)

Constants: :class:`RequestCode`, :class:`ResponseCode` (IntEnums, full 4.9.x
lists), :class:`LanguageCode`, :class:`SerializeType`, :class:`RemotingFlag`
(RESPONSE = 1, ONEWAY = 2), :class:`PullSysFlag`, ``CURRENT_VERSION`` (405,
V4_9_8), ``DEFAULT_MAX_FRAME_SIZE``.
"""

from ._codes import (
    CURRENT_VERSION,
    LanguageCode,
    PullSysFlag,
    RemotingFlag,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ._command import HeaderFieldError, RemotingCommand, RemotingProtocolError, ext_value
from ._frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    decode_frame,
    encode_frame,
    encode_frame_parts,
)
from ._json import decode_json, encode_json

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "HeaderFieldError",
    "LanguageCode",
    "PullSysFlag",
    "RemotingCommand",
    "RemotingFlag",
    "RemotingProtocolError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "decode_json",
    "encode_frame",
    "encode_frame_parts",
    "encode_json",
    "ext_value",
]

# The trio parts, imported on first use so that the codec stays importable alone.
_LAZY = {"RemotingClient": "core.remoting.client", "Route": "core.remoting.server"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'core.remoting' has no attribute {name!r}")
