"""Access control: who may publish to a topic or subscribe to a filter.

The ACL file is Mosquitto's syntax plus explicit allow/deny lines::

    # comment; blank lines are ignored
    topic read $SYS/#                  # before any `user` line: anonymous clients
    user alice                         # the lines below, up to the next `user`,
    topic readwrite alice/#            #   apply to username "alice" only
    deny publish alice/private/#
    pattern write devices/%c/up        # `pattern`: every client, wherever it stands
    pattern allow subscribe users/%u/#
    pattern deny all $SYS/broker/secret/#

Line forms (``<filter>`` is the rest of the line, so it may hold spaces):

- ``topic [read|write|readwrite|deny] <filter>``: Mosquitto's form; ``read``
  allows subscribe, ``write`` allows publish, ``readwrite`` (the default
  when the word is left out) both, ``deny`` denies both.
- ``allow|deny publish|subscribe|all <filter>``: one effect, one action.
- ``refuse subscribe <filter>``: a SUBSCRIBE naming exactly this filter
  (compared as written, after ``%c``/``%u``) is refused with 0x80
  (Unspecified error, 3.1.1 and 5.0) before any allow/deny rule is
  consulted. A policy knob, not access control: a wider filter
  (``test/#``) is unaffected and still receives those topics; use ``deny``
  to keep topics from readers. The paho conformance clients expect a
  refusal for ``test/nosubscribe`` (``pattern refuse subscribe
  test/nosubscribe`` next to ``pattern allow all #``).
- ``pattern`` followed by any of these forms: a rule for every client.
- ``user <name>`` opens a section for that username.

Rules kept here (the precedence, in this order):

1. No ACL file configured (``Acl.allow_all()``): everything is allowed.
2. A client sees the rules of its own section (its username's, or the
   anonymous section when it has no username) and every ``pattern`` rule.
3. ``%c`` is replaced by the client id and ``%u`` by the username in every
   rule. A rule whose value would be missing (``%u`` for an anonymous
   client) or would hold ``+``, ``#`` or ``/`` does not apply to that client,
   so a client id cannot widen a pattern.
4. Deny beats allow: if any applicable deny rule matches, the answer is no.
5. Otherwise yes if an applicable allow rule matches, else no (default deny).

"Matches": for publish, the rule's filter matches the topic name (MQTT
rules, ``$``-topics not matched by a leading wildcard). For subscribe, an
allow rule must *cover* the requested filter (every topic the subscription
can receive is matched by the rule: ``a/+/#`` covers ``a/b/#`` but ``a/b/#``
does not cover ``a/#``), while a deny rule applies as soon as it *overlaps*
it (some topic is matched by both: ``deny subscribe a/secret/#`` refuses a
subscription to ``a/#``). So a granted subscription never receives a topic
the ACL denies, and no per-message check is needed. For ``$share/<g>/<f>``
the rules are applied to ``<f>``.

The ACL is reloaded with ``reload()`` (SIGHUP or a file change); per-client
views from ``for_client`` notice the new generation on their next check.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gateway.config import ConfigError

log = logging.getLogger("mqgate.gateway")

Action = Literal["publish", "subscribe"]
_ACCESS = {
    "read": ("allow", frozenset({"subscribe"})),
    "write": ("allow", frozenset({"publish"})),
    "readwrite": ("allow", frozenset({"publish", "subscribe"})),
    "deny": ("deny", frozenset({"publish", "subscribe"})),
}
_ACTIONS = {
    "publish": frozenset({"publish"}),
    "subscribe": frozenset({"subscribe"}),
    "all": frozenset({"publish", "subscribe"}),
}
_CACHE_SIZE = 1024


class AclError(ValueError):
    """The ACL file is wrong; the message names the file and line."""


@dataclass(frozen=True)
class Rule:
    effect: Literal["allow", "deny", "refuse"]
    actions: frozenset[str]
    filter: str
    line: int


class Acl:
    """The parsed ACL file (or allow-all). Not thread-safe; one trio thread."""

    def __init__(self, rules_text: str | None = None, *, path: Path | None = None) -> None:
        self.path = path
        self.generation = 0
        self._configured = rules_text is not None
        self._allow_all_view: ClientAcl | None = None
        self._anonymous: list[Rule] = []
        self._users: dict[str, list[Rule]] = {}
        self._patterns: list[Rule] = []
        if rules_text is not None:
            self._anonymous, self._users, self._patterns = _parse(rules_text, str(path or "<acl>"))

    @classmethod
    def allow_all(cls) -> Acl:
        return cls(None)

    @classmethod
    def from_text(cls, text: str) -> Acl:
        return cls(text)

    @classmethod
    def from_file(cls, path: str | Path) -> Acl:
        path = Path(path)
        return cls(_read(path), path=path)

    @property
    def configured(self) -> bool:
        return self._configured

    def reload(self) -> None:
        """Read the file again. On an error the old rules stay and it is raised."""
        if self.path is None:
            return
        parsed = _parse(_read(self.path), str(self.path))
        self._anonymous, self._users, self._patterns = parsed
        self.generation += 1
        log.info("ACL %s reloaded (generation %d)", self.path, self.generation)

    def for_client(self, client_id: str, username: str | None) -> ClientAcl:
        """The view of one connection: cheap repeated checks, cached per topic.
        Without rules and without a file to reload, one view serves all."""
        if self._configured or self.path is not None:
            return ClientAcl(self, client_id, username)
        if self._allow_all_view is None:
            self._allow_all_view = ClientAcl(self, "", None)
        return self._allow_all_view

    def check(self, client_id: str, username: str | None, action: Action, topic: str) -> bool:
        """One-off check; a connection should keep ``for_client(...)`` instead."""
        return self.for_client(client_id, username).check(action, topic)

    def _rules_for(self, client_id: str, username: str | None) -> list[tuple[Rule, tuple[str, ...]]]:
        section = self._anonymous if username is None else self._users.get(username, [])
        out = []
        for rule in (*section, *self._patterns):
            text = _substitute(rule.filter, client_id, username)
            if text is not None:
                out.append((rule, tuple(text.split("/"))))
        return out


class ClientAcl:
    """One connection's view; its rules are compiled at the first check (an
    idle connection keeps four references and nothing else)."""

    __slots__ = ("_acl", "_client_id", "_username", "_generation", "_allow_all", "_rules", "_refused", "_cache")

    def __init__(self, acl: Acl, client_id: str, username: str | None) -> None:
        self._acl = acl
        self._client_id = client_id
        self._username = username
        self._generation = -1  # never an Acl's generation: the first check compiles

    def _compile(self) -> None:
        acl = self._acl
        self._generation = acl.generation
        self._allow_all = not acl.configured
        rules = acl._rules_for(self._client_id, self._username) if acl.configured else []
        self._rules = {
            (effect, action): [levels for rule, levels in rules
                               if rule.effect == effect and action in rule.actions]
            for effect in ("allow", "deny") for action in ("publish", "subscribe")
        }
        self._refused = frozenset("/".join(levels) for rule, levels in rules if rule.effect == "refuse")
        self._cache: dict[tuple[str, str], bool] = {}

    def check(self, action: Action, topic: str) -> bool:
        if self._generation != self._acl.generation:
            self._compile()
        if self._allow_all:
            return True
        key = (action, topic)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if action == "publish":
            allowed = self._check_publish(topic)
        elif action == "subscribe":
            allowed = self._check_subscribe(topic)
        else:
            raise ValueError(f"action must be 'publish' or 'subscribe', not {action!r}")
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = allowed
        return allowed

    def refuses(self, topic_filter: str) -> bool:
        """Whether a SUBSCRIBE naming exactly ``topic_filter`` is refused (0x80)
        by a ``refuse subscribe`` rule; checked before ``check``."""
        if self._generation != self._acl.generation:
            self._compile()
        return topic_filter in self._refused

    def _check_publish(self, topic: str) -> bool:
        if not topic or "+" in topic or "#" in topic:
            return False
        levels = topic.split("/")
        if any(covers(rule, levels) for rule in self._rules[("deny", "publish")]):
            return False
        return any(covers(rule, levels) for rule in self._rules[("allow", "publish")])

    def _check_subscribe(self, text: str) -> bool:
        if text.startswith("$share/"):
            parts = text.split("/", 2)
            if len(parts) < 3 or not parts[1]:
                return False
            text = parts[2]
        levels = text.split("/")
        if not valid_filter(levels):
            return False
        if any(overlaps(rule, levels) for rule in self._rules[("deny", "subscribe")]):
            return False
        return any(covers(rule, levels) for rule in self._rules[("allow", "subscribe")])


# --- filter algebra on level tuples ------------------------------------------

def valid_filter(levels: tuple[str, ...] | list[str]) -> bool:
    """MQTT filter syntax: ``#`` alone and last, ``+`` alone in its level."""
    if levels == [""] or levels == ("",):
        return False
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return True


def _dollar_guard(wide: str, narrow: str) -> bool:
    """False when a first-level wildcard faces a ``$`` first level."""
    return not (wide in ("+", "#") and narrow.startswith("$"))


def covers(rule: tuple[str, ...] | list[str], want: tuple[str, ...] | list[str]) -> bool:
    """Every topic matched by ``want`` is matched by ``rule`` (a topic name is
    a filter without wildcards, so this is also plain topic matching)."""
    for i, level in enumerate(rule):
        if i == 0 and want and not _dollar_guard(level, want[0]):
            return False
        if level == "#":
            return True  # also matches the parent level: a/# covers a
        if i >= len(want):
            return False
        asked = want[i]
        if asked == "#":
            return False
        if level == "+":
            continue
        if asked == "+" or asked != level:
            return False
    return len(want) == len(rule)


def overlaps(a: tuple[str, ...] | list[str], b: tuple[str, ...] | list[str]) -> bool:
    """Some topic name is matched by both filters."""
    if a and b and (not _dollar_guard(a[0], b[0]) or not _dollar_guard(b[0], a[0])):
        return False
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == "#" or y == "#":
            return True
        if x is None or y is None:
            return False
        if x == "+" or y == "+" or x == y:
            continue
        return False
    return True


# --- the file ------------------------------------------------------------------

def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise AclError(f"ACL file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise AclError(f"ACL file {path}: not UTF-8 ({e})") from None


def _substitute(text: str, client_id: str, username: str | None) -> str | None:
    if "%c" in text:
        if not client_id or any(ch in client_id for ch in "+#/"):
            return None
        text = text.replace("%c", client_id)
    if "%u" in text:
        if not username or any(ch in username for ch in "+#/"):
            return None
        text = text.replace("%u", username)
    return text


def _split(text: str) -> tuple[str, str]:
    parts = text.split(None, 1)
    return (parts[0], parts[1].strip()) if len(parts) == 2 else (text.strip(), "")


def _parse(text: str, where: str) -> tuple[list[Rule], dict[str, list[Rule]], list[Rule]]:
    anonymous: list[Rule] = []
    users: dict[str, list[Rule]] = {}
    patterns: list[Rule] = []
    section = anonymous
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, rest = _split(line)

        def fail(why: str) -> AclError:
            return AclError(f"{where}:{number}: {why}: {raw!r}")

        if head == "user":
            if not rest:
                raise fail("`user` needs a username")
            section = users.setdefault(rest, [])
            continue
        target = section
        if head == "pattern":
            target = patterns
            head, rest = _split(rest)
            if head not in ("allow", "deny", "refuse"):
                rest = f"{head} {rest}".strip()
                head = "topic"
        if head == "topic":
            word, tail = _split(rest)
            if word in _ACCESS and tail:
                effect, actions = _ACCESS[word]
                flt = tail
            else:
                effect, actions = "allow", _ACCESS["readwrite"][1]
                flt = rest
        elif head == "refuse":
            word, tail = _split(rest)
            if word != "subscribe":
                raise fail("`refuse` applies to subscribe only")
            effect, actions, flt = "refuse", _ACTIONS["subscribe"], tail
        elif head in ("allow", "deny"):
            word, tail = _split(rest)
            if word not in _ACTIONS:
                raise fail("expected publish, subscribe or all")
            effect, actions, flt = head, _ACTIONS[word], tail
        else:
            raise fail("expected user, topic, pattern, allow, deny or refuse")
        if not flt:
            raise fail("missing topic filter")
        if not valid_filter(flt.split("/")):
            raise fail(f"invalid topic filter {flt!r}")
        target.append(Rule(effect, actions, flt, number))  # type: ignore[arg-type]
    return anonymous, users, patterns


def acl_from_dict(table: Mapping[str, Any]) -> Acl:
    """From the ``[mqtt]`` table: ``aclFile`` (default none = allow all)."""
    path = table.get("aclFile", "")
    if not isinstance(path, str):
        raise ConfigError(f"[mqtt] aclFile must be a str, not {path!r}")
    if not path:
        return Acl.allow_all()
    try:
        return Acl.from_file(path)
    except AclError as e:
        raise ConfigError(f"[mqtt] aclFile: {e}") from None
