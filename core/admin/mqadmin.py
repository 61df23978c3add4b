"""RocketMQ ``mqadmin`` verb names and flags, as aliases of ``mqgate admin``'s own verbs.

``mqgate admin topicStatus -t T`` is ``mqgate admin topic status T``: each
alias fills the same argument names as the verb it stands for, so one
handler serves both. Only the flags listed here are taken; mqadmin's
``-n`` is the global ``--namesrv``. docs/ADMIN.md shows both side by side.
"""

from __future__ import annotations

import argparse

__all__ = ["VERBS", "add_parsers", "resolve"]


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


T = (("-t", "--topic"), {"dest": "name", "required": True})
G = (("-g", "--consumerGroup"), {"dest": "group", "required": True})

# mqadmin verb -> (area, action, help, flags); action None is chosen by `resolve`
VERBS: dict[str, tuple[str, str | None, str, list]] = {
    "updateTopic": ("topic", "create", "= topic create", [
        T,
        (("-w", "--writeQueueNums"), {"dest": "queues", "type": int, "default": 8,
                                      "help": "queue count (reads and writes use one count)"}),
        (("-r", "--readQueueNums"), {"dest": "queues", "type": int, "help": "same as -w"}),
        (("-p", "--perm"), {"type": int, "default": 6}),
        (("-o", "--order"), {"type": _bool, "default": False, "help": "true: ordered topic"}),
        (("-c", "--clusterName"), {"dest": "cluster"}),
        (("-b", "--brokerAddr"), {"dest": "broker"}),
    ]),
    "deleteTopic": ("topic", "delete", "= topic delete", [T, (("-c", "--clusterName"), {"dest": "cluster"})]),
    "topicList": ("topic", "list", "= topic list", []),
    "topicRoute": ("topic", "route", "= topic route", [T]),
    "topicStatus": ("topic", "status", "= topic status", [T]),
    "clusterList": ("cluster", "list", "= cluster list", []),
    "brokerStatus": ("broker", "runtime", "= broker runtime", [(("-b", "--brokerAddr"), {"dest": "broker"})]),
    "consumerProgress": ("group", None, "= group progress (with -g) or group list", [
        (("-g", "--groupName"), {"dest": "group"}),
        (("-t", "--topicName"), {"dest": "topic", "action": "append"}),
    ]),
    "consumerConnection": ("group", "connections", "= group connections", [G]),
    "consumerStatus": ("group", "status", "= group status", [
        G,
        (("-i", "--clientId"), {"dest": "client"}),
        (("-s", "--jstack"), {"dest": "jstack", "action": "store_true"}),
    ]),
    "updateSubGroup": ("group", "update", "= group update", [
        (("-g", "--groupName"), {"dest": "group", "required": True}),
        (("-o", "--consumeMessageOrderly"), {"dest": "orderly", "type": _bool}),
        (("-r", "--retryMaxTimes"), {"dest": "retry_max_times", "type": int}),
        (("-s", "--consumeEnable"), {"dest": "consume_enable", "type": _bool}),
        (("-c", "--clusterName"), {"dest": "cluster", "help": "accepted; every master is updated"}),
        (("-b", "--brokerAddr"), {"dest": "broker", "help": "accepted; every master is updated"}),
    ]),
    "resetOffsetByTime": ("group", "reset-offset", "= group reset-offset", [
        (("-g", "--group"), {"dest": "group", "required": True}),
        (("-t", "--topic"), {"dest": "topic", "required": True}),
        (("-s", "--timestamp"), {"dest": "time", "required": True,
                                 "help": "now | ms since the epoch | yyyy-MM-dd#HH:mm:ss:SSS"}),
        (("-f", "--force"), {"dest": "force", "type": _bool, "default": True}),
        (("-c", "--cplus"), {"dest": "cplus", "action": "store_true",
                             "help": "accepted; C++ clients get their body form anyway"}),
    ]),
    "queryMsgByKey": ("message", "key", "= message key", [
        (("-t", "--topic"), {"dest": "topic", "required": True}),
        (("-k", "--msgKey"), {"dest": "key", "required": True}),
        (("-m", "--max"), {"dest": "max", "type": int, "default": 32}),
    ]),
    "queryMsgById": ("message", "id", "= message id", [
        (("-i", "--msgId"), {"dest": "msg_id", "required": True}),
        (("-t", "--topic"), {"dest": "topic"}),
        (("-g", "--consumerGroup"), {"dest": "group", "help": "with -d: consume it directly"}),
        (("-d", "--clientId"), {"dest": "client"}),
    ]),
    "queryMsgByUniqueKey": ("message", "id", "= message id --topic", [
        (("-i", "--msgId"), {"dest": "msg_id", "required": True}),
        (("-t", "--topic"), {"dest": "topic", "required": True}),
    ]),
    "queryMsgTraceById": ("trace", "show", "= trace MSGID", [
        (("-i", "--msgId"), {"dest": "msg_id", "required": True}),
        (("-t", "--traceTopic"), {"dest": "trace_topic", "default": "RMQ_SYS_TRACE_TOPIC"}),
    ]),
}


def add_parsers(sub) -> None:
    for verb, (area, action, help_text, flags) in VERBS.items():
        p = sub.add_parser(verb, help=help_text)
        for names, kwargs in flags:
            p.add_argument(*names, **kwargs)
        p.set_defaults(area=area, action=action, mqadmin=verb)


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    """Fill what the aliased verb needs but mqadmin does not ask for."""
    verb = getattr(a, "mqadmin", None)
    if verb == "consumerProgress":
        a.action = "progress" if a.group else "list"
    if verb == "queryMsgTraceById":
        a.key = a.topic = None
    return a
