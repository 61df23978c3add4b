"""Plain ACL: signatures, white addresses, permissions; over the wire with our client."""

import pytest
import trio

from core.processors import BrokerRemoting
from core.processors.acl import AclError, PlainAcl, request_content, sign
from core.remoting import RemotingCommand, RequestCode, ResponseCode
from core.remoting.client import RemotingClient

from wire import pull_req, send_req

ACL_TOML = """
globalWhiteRemoteAddresses = ["10.10.*.*"]
[[accounts]]
accessKey = "producer1"
secretKey = "secret-p1"
defaultTopicPerm = "DENY"
topicPerms = ["Orders=PUB", "Secret=DENY"]
[[accounts]]
accessKey = "consumer1"
secretKey = "secret-c1"
defaultTopicPerm = "SUB"
defaultGroupPerm = "SUB"
[[accounts]]
accessKey = "adminuser"
secretKey = "secret-admin"
admin = true
whiteRemoteAddress = "192.168.0.{1,2}"
"""


def signed(req, ak, sk):
    req.ext_fields["AccessKey"] = ak
    req.ext_fields["Signature"] = sign(request_content(req), sk)
    return req


@pytest.fixture
def acl(tmp_path):
    p = tmp_path / "plain_acl.toml"
    p.write_text(ACL_TOML)
    return PlainAcl.from_file(p)


def test_sign_matches_java_example():
    # HmacSHA1 base64, as AclSigner.calSignature (value from: echo -n hello | openssl dgst -sha1 -hmac 12345678 -binary | base64)
    assert sign(b"hello", "12345678") == "XDYb11J68gEBTjsZbXd1ri9i2fM="


def test_checks(acl):
    ok = signed(send_req("Orders", b"x"), "producer1", "secret-p1")
    acl.check("127.0.0.1", ok)
    with pytest.raises(AclError, match="signature"):
        acl.check("127.0.0.1", signed(send_req("Orders", b"x"), "producer1", "wrong"))
    with pytest.raises(AclError, match="No acl config"):
        acl.check("127.0.0.1", signed(send_req("Orders", b"x"), "nobody", "x"))
    with pytest.raises(AclError, match="No accessKey"):
        acl.check("127.0.0.1", send_req("Orders", b"x"))
    with pytest.raises(AclError, match="topic=Other"):
        acl.check("127.0.0.1", signed(send_req("Other", b"x"), "producer1", "secret-p1"))
    acl.check("10.10.3.4", send_req("Secret", b"x"))  # global white address
    acl.check("192.168.0.2", signed(send_req("Any", b"x"), "adminuser", "nope"))  # account white address
    with pytest.raises(AclError, match="admin"):
        acl.check("127.0.0.1", signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}),
                                      "consumer1", "secret-c1"))
    acl.check("127.0.0.1", signed(pull_req("Orders", 0, 0), "consumer1", "secret-c1"))


async def test_acl_over_the_wire(nursery, tmp_path, acl):
    from core.broker import Broker, BrokerConfig
    from core.store import StoreConfig

    broker = Broker(BrokerConfig(listen_port=0), StoreConfig(store_path_root_dir=str(tmp_path / "s")))
    await nursery.start(broker.run)
    port = await nursery.start(BrokerRemoting(broker, "127.0.0.1", 0, [], acl=acl).run)
    addr = f"127.0.0.1:{port}"
    client = RemotingClient(nursery)
    r = await client.invoke(addr, signed(send_req("Orders", b"x", queue_id=0), "producer1", "secret-p1"))
    assert r.code == 0
    r = await client.invoke(addr, signed(send_req("Orders", b"x", queue_id=0), "producer1", "bad"))
    assert r.code == ResponseCode.SYSTEM_ERROR and "Check signature failed" in r.remark
    r = await client.invoke(addr, RemotingCommand.request(99999))  # no route: not an ACL matter
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert broker.max_offset("Orders", 0) == 1
    client.aclose_nowait()
