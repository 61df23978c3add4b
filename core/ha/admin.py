"""``mqgate admin ha status|promote``: the replication groups as an operator sees them.

- ``ha status``: every broker the name servers know, grouped by
  ``brokerName``: role, registered and configured ids, epoch, log offsets,
  lag behind its master, and, from each master, its slaves' links and which
  are in sync (GET_BROKER_HA_STATUS, 907).
- ``ha promote <brokerName> <brokerId>``: a manual failover or switchover
  (the only kind without etcd).  Steps: read every reachable member's status;
  refuse a target that is not a slave, or (without ``--force``) one behind
  another reachable slave; demote a reachable master first (it stops taking
  writes and will follow the target) and wait, bounded, for the target to
  hold everything the old master has, so a switchover loses nothing; then
  promote the target with the next epoch (NOTIFY_BROKER_ROLE_CHANGED, 1008).
  Other slaves learn the new master from the name server.
"""

from __future__ import annotations

import json
import time

import trio

from core.remoting import RequestCode, ResponseCode


class HAAdminError(Exception):
    pass


def add_parser(sub) -> None:
    ha = sub.add_parser("ha", help="replication groups: status, manual failover").add_subparsers(dest="action", required=True)
    ha.add_parser("status", help="each group's master, slaves, offsets, lag, epoch and in-sync set")
    p = ha.add_parser("promote", help="make a slave the master of its group (manual failover or switchover)")
    p.add_argument("broker_name", metavar="brokerName")
    p.add_argument("broker_id", metavar="brokerId", type=int, help="the slave's registered id (see ha status)")
    p.add_argument("--force", action="store_true", help="promote even if another slave holds more of the log")
    p.add_argument("--catch-up-timeout", type=float, default=10.0, help="seconds to wait for the target to catch up")


async def _status_of(api, addr: str) -> dict | None:
    try:
        resp = await api.call(addr, RequestCode.GET_BROKER_HA_STATUS)
    except Exception:  # an unreachable member is shown as such, not an error
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    return json.loads(resp.body)


async def _groups(admin) -> dict[str, dict[int, str]]:
    info = await admin.on_namesrv(admin.api.get_cluster_info)
    return {name: {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            for name, bd in (info.get("brokerAddrTable") or {}).items()}


async def ha_status(admin, a) -> dict:
    groups = []
    for name, addrs in sorted((await _groups(admin)).items()):
        members = []
        for bid, addr in sorted(addrs.items()):
            st = await _status_of(admin.api, addr)
            members.append({"brokerId": bid, "addr": addr, **({"role": "UNREACHABLE"} if st is None else st)})
        master = next((m for m in members if m.get("role", "").endswith("MASTER")), None)
        top = master["maxOffset"] if master else max((m.get("maxOffset", -1) for m in members), default=-1)
        for m in members:
            m["lag"] = max(0, top - m["maxOffset"]) if "maxOffset" in m and m["maxOffset"] >= 0 else None
        in_sync = [s["addr"] for s in (master or {}).get("slaves", []) if s.get("inSync")]
        groups.append({"brokerName": name, "master": master["addr"] if master else None,
                       "epoch": max((m.get("epoch", 0) for m in members), default=0), "inSync": in_sync,
                       "controller": next((m["controller"] for m in members if m.get("controller")), None),
                       "members": members})
    return {"groups": groups}


async def ha_promote(admin, a) -> dict:
    addrs = (await _groups(admin)).get(a.broker_name)
    if not addrs:
        raise HAAdminError(f"no broker group named {a.broker_name!r} is registered with the name servers")
    if a.broker_id not in addrs:
        raise HAAdminError(f"{a.broker_name} has no broker with registered id {a.broker_id} (it has {sorted(addrs)})")
    target_addr = addrs[a.broker_id]
    statuses = {bid: await _status_of(admin.api, addr) for bid, addr in addrs.items()}
    target = statuses[a.broker_id]
    if target is None:
        raise HAAdminError(f"{target_addr} does not answer")
    if target["role"] != "SLAVE":
        raise HAAdminError(f"{a.broker_name} {a.broker_id} at {target_addr} is already {target['role']}")
    if target.get("controller"):
        raise HAAdminError(f"{a.broker_name} fails over automatically (etcd): stop its master to fail over")
    epoch = max(st["epoch"] for st in statuses.values() if st) + 1
    ahead = [bid for bid, st in statuses.items() if st and st["role"] == "SLAVE" and st["maxOffset"] > target["maxOffset"]]
    if ahead and not a.force:
        raise HAAdminError(f"slave(s) {ahead} hold more of the log than {a.broker_id}; promote one of them or use --force")
    demoted = []
    for bid, st in statuses.items():
        if st and st["role"] != "SLAVE":
            await _notify(admin.api, addrs[bid], "SLAVE", epoch, target_addr, a.broker_id)
            demoted.append({"brokerId": bid, "addr": addrs[bid], "maxOffset": st["maxOffset"]})
    caught_up = await _catch_up(admin.api, target_addr, max((d["maxOffset"] for d in demoted), default=-1),
                                a.catch_up_timeout)
    await _notify(admin.api, target_addr, "MASTER", epoch, "", 0)
    return {"brokerName": a.broker_name, "promoted": target_addr, "epoch": epoch, "demoted": demoted,
            "caughtUp": caught_up}


async def _catch_up(api, addr: str, goal: int, timeout: float) -> bool:
    """Wait until the target holds the old master's log (bounded); False if it did not."""
    if goal < 0:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = await _status_of(api, addr)
        if st and st["maxOffset"] >= goal:
            return True
        await trio.sleep(0.1)
    return False


async def _notify(api, addr: str, role: str, epoch: int, master_addr: str, broker_id: int) -> None:
    resp = await api.call(addr, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                          {"role": role, "epoch": epoch, "masterAddr": master_addr, "brokerId": broker_id,
                           "reason": "mqgate admin ha promote"})
    if resp.code != ResponseCode.SUCCESS:
        raise HAAdminError(f"{addr} refused to become {role}: {resp.remark}")


def render(action: str, result: dict, table, out) -> None:
    if action == "status":
        for g in result["groups"]:
            print(f"[{g['brokerName']}] master {g['master'] or '-'}  epoch {g['epoch']}  in sync: "
                  f"{', '.join(g['inSync']) or '-'}" + ("  (etcd failover)" if g["controller"] else ""), file=out)
            table(g["members"], ["brokerId", "addr", "role", "epoch", "minOffset", "maxOffset", "lag"], out)
    else:
        how = "" if result["caughtUp"] else " (it had NOT caught up with the old master: some bytes were not copied)"
        print(f"{result['brokerName']}: {result['promoted']} is master, epoch {result['epoch']}{how}", file=out)
        for d in result["demoted"]:
            print(f"  {d['addr']} (was master) follows it", file=out)
