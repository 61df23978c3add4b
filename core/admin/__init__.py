"""``mqgate admin``: RocketMQ administration over the native protocol (mqadmin's verbs).

Usage (``--namesrv``/``-n`` defaults to ``$NAMESRV_ADDR`` or 127.0.0.1:9876;
global options ``--namesrv``, ``--json``, ``--timeout`` may come anywhere)::

    mqgate admin topic create NAME [--queues 8] [--order] [--perm 6] [--cluster C] [--broker H:P]
    mqgate admin topic list | route NAME | delete NAME [--cluster C] | status NAME
    mqgate admin cluster list
    mqgate admin group list | progress GROUP [--topic T] | connections GROUP
    mqgate admin group reset-offset GROUP TOPIC TIME [--no-force]
    mqgate admin message key TOPIC KEY [--max 32] | id MSGID [--topic T]
    mqgate admin dlq resend GROUP [--max N]
    mqgate admin ha status | promote BROKERNAME BROKERID
    mqgate admin broker runtime [--broker H:P]

and mqadmin's names with its flags (``updateTopic``, ``deleteTopic``,
``topicList``, ``topicRoute``, ``topicStatus``, ``clusterList``,
``brokerStatus``, ``consumerProgress``, ``consumerConnection``,
``resetOffsetByTime``, ``queryMsgByKey``, ``queryMsgById``,
``queryMsgByUniqueKey``). docs/ADMIN.md documents each next to mqadmin's.

Rules kept here: everything goes through the requests mqadmin sends (the
name servers for routes, topic lists and the cluster's brokers, each master
broker for the rest); the rules of each verb are in its module (`topics`,
`groups`, `messages`, `cluster`, `core.ha.admin`), those of the command
line in `cli`.
"""

from core.admin.actions import cluster_overview, create_topic, reset_group_offset, trace_message
from core.admin.base import AdminError
from core.admin.cli import admin_main, run_admin
from core.admin.render import table

__all__ = ["AdminError", "admin_main", "cluster_overview", "create_topic", "reset_group_offset", "run_admin", "table", "trace_message"]
