"""ACL file: syntax, precedence, %c/%u patterns, subscribe filter coverage."""

import pytest

from gateway.acl import Acl, AclError, acl_from_dict, covers, overlaps
from gateway.config import ConfigError

ACL = """\
# anonymous clients
topic read public/#

user alice
topic readwrite alice/#
deny publish alice/private/#
topic write shared/in
allow subscribe shared/+/out

user bob
topic deny alice/#
topic read #

pattern write devices/%c/up
pattern read devices/%c/down/#
pattern allow subscribe users/%u/#
pattern deny all $SYS/broker/secret/#
"""


@pytest.fixture
def acl():
    return Acl.from_text(ACL)


def test_no_acl_file_allows_everything():
    acl = Acl.allow_all()
    assert not acl.configured
    assert acl.check("c", None, "publish", "anything/at/all")
    assert acl.check("c", "u", "subscribe", "#")


@pytest.mark.parametrize("client_id, username, action, topic, expected", [
    # anonymous section
    ("c1", None, "subscribe", "public/#", True),
    ("c1", None, "subscribe", "public/a/b", True),
    ("c1", None, "publish", "public/a", False),
    ("c1", None, "subscribe", "#", False),
    # a user does not get the anonymous section
    ("c1", "alice", "subscribe", "public/a", False),
    # user section, deny beats allow
    ("c1", "alice", "publish", "alice/x", True),
    ("c1", "alice", "subscribe", "alice/x/#", True),
    ("c1", "alice", "publish", "alice/private/x", False),
    ("c1", "alice", "publish", "alice/private", False),  # a/# matches its parent a
    ("c1", "alice", "subscribe", "alice/private/x", True),  # the deny is publish only
    ("c1", "alice", "publish", "shared/in", True),
    ("c1", "alice", "subscribe", "shared/in", False),  # write only
    ("c1", "alice", "subscribe", "shared/x/out", True),
    ("c1", "alice", "subscribe", "shared/+/out", True),
    ("c1", "alice", "subscribe", "shared/#", False),
    ("c1", "alice", "publish", "shared/x/out", False),
    # bob reads everything but alice's, and $ topics are not under #
    ("c1", "bob", "subscribe", "x/y", True),
    ("c1", "bob", "subscribe", "alice/x", False),
    ("c1", "bob", "subscribe", "#", False),  # overlaps the deny on alice/#
    ("c1", "bob", "subscribe", "+/x", False),  # overlaps alice/x
    ("c1", "bob", "subscribe", "bob/#", True),
    ("c1", "bob", "subscribe", "$SYS/broker/uptime", False),
    # an unknown user gets only the patterns; unknown = default deny
    ("c1", "carol", "publish", "anything", False),
])
def test_precedence(acl, client_id, username, action, topic, expected):
    assert acl.check(client_id, username, action, topic) is expected


def test_patterns_substitute_client_id_and_username(acl):
    assert acl.check("dev7", None, "publish", "devices/dev7/up")
    assert not acl.check("dev7", None, "publish", "devices/dev8/up")
    assert acl.check("dev7", "carol", "subscribe", "devices/dev7/down/#")
    assert not acl.check("dev7", "carol", "subscribe", "devices/+/down/#")
    assert acl.check("dev7", "carol", "subscribe", "users/carol/inbox")
    assert not acl.check("dev7", "carol", "subscribe", "users/alice/inbox")
    # %u does not apply to an anonymous client
    assert not acl.check("dev7", None, "subscribe", "users//inbox")


@pytest.mark.parametrize("client_id", ["+", "#", "a/b", ""])
def test_pattern_value_with_wildcards_or_slash_does_not_apply(acl, client_id):
    assert not acl.check(client_id, None, "publish", f"devices/{client_id}/up")
    assert not acl.check(client_id, None, "publish", "devices/x/up")


def test_pattern_deny_applies_to_everybody():
    acl = Acl.from_text("topic readwrite #\ntopic readwrite $SYS/#\n"
                        "pattern deny all $SYS/broker/secret/#\n")
    assert acl.check("c", None, "subscribe", "$SYS/broker/uptime")
    assert not acl.check("c", None, "subscribe", "$SYS/broker/secret/key")
    assert not acl.check("c", None, "subscribe", "$SYS/#")  # overlaps the deny
    assert not acl.check("c", None, "publish", "$SYS/broker/secret")


def test_shared_subscription_checked_on_its_filter(acl):
    assert acl.check("c", "alice", "subscribe", "$share/g/alice/#")
    assert not acl.check("c", "alice", "subscribe", "$share/g/bob/#")
    assert not acl.check("c", "alice", "subscribe", "$share//alice/x")
    assert not acl.check("c", "alice", "subscribe", "$share/g")


def test_invalid_topics_are_refused(acl):
    assert not acl.check("c", "alice", "publish", "alice/+")
    assert not acl.check("c", "alice", "publish", "")
    assert not acl.check("c", "alice", "subscribe", "alice/#/x")
    assert not acl.check("c", "alice", "subscribe", "alice/a+")


@pytest.mark.parametrize("rule, want, expected", [
    ("a/#", "a", True), ("a/#", "a/b/#", True), ("a/+/#", "a/b/#", True),
    ("a/b/#", "a/#", False), ("a/+", "a/b", True), ("a/+", "a/+", True), ("a/b", "a/+", False),
    ("#", "a/+/c", True), ("#", "$SYS/x", False), ("+/x", "$SYS/x", False), ("+/#", "+/#", True),
    ("$SYS/#", "$SYS/a", True), ("a/+", "a/b/c", False), ("a/b/c", "a/b", False),
    ("+", "", True), ("+/+", "/", True),
])
def test_covers(rule, want, expected):
    assert covers(rule.split("/"), want.split("/")) is expected


@pytest.mark.parametrize("a, b, expected", [
    ("a/#", "a", True), ("a/secret/#", "a/#", True), ("#", "$SYS/x", False),
    ("+/x", "a/+", True), ("a/b", "a/c", False), ("a/+/c", "a/b", False), ("a/+", "+/b", True),
    ("+/#", "$SYS/#", False), ("$SYS/#", "$SYS/+", True),
])
def test_overlaps(a, b, expected):
    assert overlaps(a.split("/"), b.split("/")) is expected
    assert overlaps(b.split("/"), a.split("/")) is expected


@pytest.mark.parametrize("text, where", [
    ("user\n", ":1:"),
    ("topic read\tfoo/#/bar\n", ":1:"),
    ("# ok\nfrobnicate a/b\n", ":2:"),
    ("allow publish\n", ":1:"),
    ("allow everything a/b\n", ":1:"),
    ("pattern deny sometimes a\n", ":1:"),
    ("refuse publish a/b\n", ":1:"),
    ("pattern refuse subscribe\n", ":1:"),
])
def test_syntax_errors_name_the_line(text, where):
    with pytest.raises(AclError, match=where):
        Acl.from_text(text)


def test_mosquitto_forms_without_access_word_and_with_tabs():
    acl = Acl.from_text("user  u1\ntopic a/b c\ntopic\tread\tx/y\n")
    assert acl.check("c", "u1", "publish", "a/b c")  # the filter is the rest of the line
    assert acl.check("c", "u1", "subscribe", "x/y")
    assert not acl.check("c", "u1", "publish", "x/y")


def test_refuse_is_literal_and_leaves_wider_filters_alone():
    acl = Acl.from_text("pattern refuse subscribe test/nosubscribe\nrefuse subscribe %c/x\npattern allow all #\n")
    view = acl.for_client("dev", None)
    assert view.refuses("test/nosubscribe") and view.refuses("dev/x")
    assert not view.refuses("test/#") and not view.refuses("#") and not view.refuses("other/x")
    assert view.check("subscribe", "test/#") and view.check("subscribe", "#")
    assert view.check("publish", "test/nosubscribe")
    assert not Acl.allow_all().for_client("dev", None).refuses("test/nosubscribe")


def test_reload_reaches_existing_client_views(tmp_path):
    path = tmp_path / "acl"
    path.write_text("topic readwrite a/#\n")
    acl = Acl.from_file(path)
    view = acl.for_client("c", None)
    assert view.check("publish", "a/1") and not view.check("publish", "b/1")
    path.write_text("topic readwrite b/#\n")
    acl.reload()
    assert not view.check("publish", "a/1") and view.check("publish", "b/1")
    path.write_text("topic bogus words a/#\nnonsense\n")
    with pytest.raises(AclError, match=":2:"):
        acl.reload()
    assert view.check("publish", "b/1")  # the old rules stay


def test_from_dict(tmp_path):
    assert not acl_from_dict({}).configured
    path = tmp_path / "acl"
    path.write_text("topic a\n")
    assert acl_from_dict({"aclFile": str(path), "port": 1}).check("c", None, "publish", "a")
    with pytest.raises(ConfigError, match="aclFile"):
        acl_from_dict({"aclFile": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="aclFile"):
        acl_from_dict({"aclFile": 3})


def test_client_view_compiles_at_first_check_with_rules_of_that_time(tmp_path):
    path = tmp_path / "acl"
    path.write_text("topic readwrite a/#\n")
    acl = Acl.from_file(path)
    view = acl.for_client("c", None)  # an idle connection's view: nothing compiled yet
    path.write_text("topic readwrite b/#\n")
    acl.reload()
    assert view.check("publish", "b/1") and not view.check("publish", "a/1")
    assert not acl.for_client("c", None).refuses("b/1")
