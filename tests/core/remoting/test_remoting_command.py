"""RemotingCommand: building, flags, typed header getters, constants."""

import pytest

import core.remoting as rm
from core.remoting import (
    HeaderFieldError,
    PullSysFlag,
    RemotingCommand,
    RemotingFlag,
    RemotingProtocolError,
    RequestCode,
    ResponseCode,
    SerializeType,
    ext_value,
)


def cmd(**ext):
    return RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=ext)


def test_request_and_response_helpers():
    req = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, {"x": 1, "y": None},
                                  body=b"{}", opaque=42, oneway=True,
                                  serialize_type=SerializeType.ROCKETMQ)
    assert req.is_oneway and not req.is_response and req.flag == RemotingFlag.ONEWAY
    assert req.ext_fields == {"x": "1"} and type(req.code) is int
    resp = req.make_response(ResponseCode.SUCCESS, ext={"ok": True, "n": 2**40})
    assert resp.is_response and not resp.is_oneway
    assert (resp.opaque, resp.serialize_type, resp.remark) == (42, SerializeType.ROCKETMQ, None)
    assert resp.ext_fields == {"ok": "true", "n": "1099511627776"}
    assert resp.body == b"" and resp.code == 0
    err = req.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            remark=" request type 42 not supported")
    assert err.remark.endswith("not supported")


@pytest.mark.parametrize("value,text", [
    ("s", "s"), (True, "true"), (False, "false"), (0, "0"), (-7, "-7"),
    (ResponseCode.TOPIC_NOT_EXIST, "17"), (1.5, "1.5"),
])
def test_ext_value(value, text):
    assert ext_value(value) == text


def test_ext_value_rejects_other_types():
    with pytest.raises(TypeError):
        ext_value(b"x")


def test_missing_required_field_names_it():
    with pytest.raises(HeaderFieldError, match=r"the custom field <topic> is null"):
        cmd().get_str("topic")
    for getter in ("get_int", "get_long", "get_bool"):
        with pytest.raises(HeaderFieldError, match="<queueId>"):
            getattr(cmd(), getter)("queueId")
    assert not issubclass(HeaderFieldError, RemotingProtocolError)


def test_defaults_for_optional_fields():
    c = cmd()
    assert c.get_str("properties", None) is None
    assert c.get_int("reconsumeTimes", 0) == 0
    assert c.get_long("x", -1) == -1
    assert c.get_bool("unitMode", False) is False


@pytest.mark.parametrize("text,value", [
    ("0", 0), ("-1", -1), ("+5", 5), ("2147483647", 2**31 - 1), ("-2147483648", -(2**31)),
])
def test_get_int(text, value):
    assert cmd(q=text).get_int("q") == value


@pytest.mark.parametrize("text", ["", " 1", "1.0", "2147483648", "0x10", "1_000", "١", "abc"])
def test_get_int_rejects(text):
    with pytest.raises(HeaderFieldError, match="not a valid int"):
        cmd(q=text).get_int("q")


def test_get_long():
    assert cmd(t="9223372036854775807").get_long("t") == 2**63 - 1
    assert cmd(t="1700000000000").get_long("t") == 1700000000000
    with pytest.raises(HeaderFieldError, match="not a valid long"):
        cmd(t="9223372036854775808").get_long("t")


@pytest.mark.parametrize("text,java,cpp", [
    ("true", True, True), ("TRUE", True, True), ("True", True, True),
    ("false", False, False), ("1", False, True), ("0", False, False),
    ("yes", False, False), ("", False, False),
])
def test_get_bool_java_and_cpp_readings(text, java, cpp):
    c = cmd(b=text)
    assert c.get_bool("b") is java
    assert c.get_bool("b", cpp_compatible=True) is cpp


def test_constants():
    assert RequestCode.SEND_MESSAGE == 10 and RequestCode.SEND_MESSAGE_V2 == 310
    assert RequestCode.SEND_BATCH_MESSAGE == 320 and RequestCode.GET_ROUTEINFO_BY_TOPIC == 105
    assert RequestCode.NOTIFY_CONSUMER_IDS_CHANGED == 40
    assert RequestCode.DELETE_EXPIRED_COMMITLOG == 329
    assert ResponseCode.PULL_OFFSET_MOVED == 21 and ResponseCode.FLOW_CONTROL == 215
    assert ResponseCode.TRANSACTION_STATE_GROUP_WRONG == 203
    assert PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET == 3
    assert rm.LanguageCode.OMS == 11 and rm.LanguageCode["CPP"] == 1
    # every code of reference 2.1 is there
    for code in (10, 310, 320, 11, 12, 14, 15, 17, 21, 29, 30, 31, 32, 33, 34, 35, 36,
                 37, 38, 39, 40, 41, 42, 105, 103, 104, 106, 206, 220, 307, 309):
        RequestCode(code)


def test_exports():
    for name in rm.__all__:
        assert not name.startswith("_") and getattr(rm, name) is not None
