"""Scenario definitions: who connects, who publishes what, who should get it.

Rules it keeps:

- A scenario is plain data (``Scenario``) turned into a list of picklable
  ``ClientSpec`` by ``build``; nothing here opens a socket.
- Every run is bounded: a scenario always has a finite message count per
  publisher (or connection count) and a wall-time ``timeout`` in seconds.
- Topics and client ids carry a run id, so runs never see each other's
  sessions or messages on a broker that stays up.
- ``expected_groups`` says, per publisher, which delivery groups should get
  its messages (see ``accounting``); a subscriber's ``expected`` is the number
  of arrivals after which it may stop early (None when it cannot know, as in a
  shared subscription).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

NAMES = ("fan-in", "fan-out", "p2p", "shared", "qos", "payload",
         "persistent", "storm", "latency")


@dataclass
class Scenario:
    name: str
    publishers: int = 4
    subscribers: int = 1
    count: int = 1000            # messages per publisher
    qos: int = 0
    payload: int = 64            # bytes, at least the 20-byte stamp
    rate: float = 0.0            # msgs/s per publisher; 0 = as fast as possible
    connections: int = 0         # storm only
    protocol: int = 4            # 4 = MQTT 3.1.1, 5 = MQTT 5.0
    mode: str = "raw"            # raw | paho
    inflight: int = 100          # QoS 1/2 window per publisher
    workers: int = 0             # client processes; 0 = automatic
    timeout: float = 60.0        # hard wall-time bound of the whole run, s
    drain: float = 2.0           # quiet time after the last publish, s
    bucket: float = 0.1          # width of throughput-over-time buckets, s
    label: str = ""              # name in reports (payload sweeps etc.)

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(f"unknown scenario {self.name!r}; one of {', '.join(NAMES)}")
        if self.qos not in (0, 1, 2):
            raise ValueError("qos must be 0, 1 or 2")
        if self.mode not in ("raw", "paho"):
            raise ValueError("mode must be raw or paho")
        if self.protocol not in (4, 5):
            raise ValueError("protocol must be 4 (3.1.1) or 5")
        if self.payload < 20:
            raise ValueError("payload must be at least 20 bytes (the stamp)")
        if self.timeout <= 0 or self.count < 0:
            raise ValueError("count and timeout must be positive")
        if self.name == "shared":
            self.protocol = 5
        if self.name == "storm" and self.connections <= 0:
            raise ValueError("storm needs connections > 0")
        if not self.label:
            self.label = self.name

    def params(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ClientSpec:
    role: str                    # pub | sub | idle
    client_id: str
    topic: str = ""              # pub: topic it publishes to
    filters: list[str] = field(default_factory=list)   # sub
    publisher: int = 0           # pub: id written in the stamp
    count: int = 0               # pub: messages to send
    rate: float = 0.0
    group: str = ""              # sub: delivery group
    expected: int | None = None  # sub: arrivals after which it may stop
    clean: bool = True
    offline_while_publishing: bool = False   # sub: persistent-session test


@dataclass
class Plan:
    clients: list[ClientSpec]
    expected_groups: dict[int, list[str]]


def build(s: Scenario, run_id: str) -> Plan:
    """The clients of one run of ``s``."""
    base = f"lt/{run_id}"
    cid = f"lt-{run_id}"
    clients: list[ClientSpec] = []
    groups: dict[int, list[str]] = {}

    def pub(i: int, topic: str, count: int | None = None) -> ClientSpec:
        return ClientSpec("pub", f"{cid}-p{i}", topic=topic, publisher=i,
                          count=s.count if count is None else count, rate=s.rate)

    if s.name == "fan-in":
        clients += [pub(i, f"{base}/in/{i}") for i in range(s.publishers)]
        clients += [ClientSpec("sub", f"{cid}-s0", filters=[f"{base}/in/#"],
                               group="s0", expected=s.publishers * s.count)]
        groups = {i: ["s0"] for i in range(s.publishers)}
    elif s.name == "fan-out":
        clients += [pub(0, f"{base}/out")]
        subs = [f"s{j}" for j in range(s.subscribers)]
        clients += [ClientSpec("sub", f"{cid}-{g}", filters=[f"{base}/out"],
                               group=g, expected=s.count) for g in subs]
        groups = {0: subs}
    elif s.name in ("p2p", "qos", "payload", "latency"):
        pairs = s.publishers if s.name == "p2p" else 1
        for i in range(pairs):
            clients.append(pub(i, f"{base}/pair/{i}"))
            clients.append(ClientSpec("sub", f"{cid}-s{i}", filters=[f"{base}/pair/{i}"],
                                      group=f"s{i}", expected=s.count))
            groups[i] = [f"s{i}"]
    elif s.name == "shared":
        clients += [pub(i, f"{base}/sh/{i}") for i in range(s.publishers)]
        clients += [ClientSpec("sub", f"{cid}-s{j}", filters=[f"$share/g/{base}/sh/+"],
                               group="g") for j in range(s.subscribers)]
        groups = {i: ["g"] for i in range(s.publishers)}
    elif s.name == "persistent":
        clients += [pub(i, f"{base}/ps/{i}") for i in range(s.publishers)]
        clients += [ClientSpec("sub", f"{cid}-s0", filters=[f"{base}/ps/#"], group="s0",
                               expected=s.publishers * s.count, clean=False,
                               offline_while_publishing=True)]
        groups = {i: ["s0"] for i in range(s.publishers)}
    elif s.name == "storm":
        clients += [ClientSpec("idle", f"{cid}-c{k}") for k in range(s.connections)]
    return Plan(clients, groups)


def split(clients: list[ClientSpec], workers: int) -> list[list[ClientSpec]]:
    """Deal clients over worker processes: subscribers first, round robin,
    so that no process holds every subscriber while another only publishes."""
    workers = max(1, min(workers, len(clients)))
    ordered = ([c for c in clients if c.role == "sub"]
               + [c for c in clients if c.role != "sub"])
    out: list[list[ClientSpec]] = [[] for _ in range(workers)]
    for i, c in enumerate(ordered):
        out[i % workers].append(c)
    return [w for w in out if w]


def default_workers(s: Scenario, cpus: int) -> int:
    if s.workers:
        return s.workers
    if s.name == "storm":
        return max(2, min(8, s.connections // 500 or 1))
    clients = {"fan-in": s.publishers + 1, "fan-out": 1 + s.subscribers,
               "p2p": 2 * s.publishers, "shared": s.publishers + s.subscribers,
               "persistent": s.publishers + 1}.get(s.name, 2)
    return max(2, min(clients, 2 * cpus, 8))


# The standard set of the issue (``make bench``); each entry is
# (id, scenario, ours needs --flush sync).
STANDARD = [
    ("S1", Scenario("fan-in", publishers=4, count=20000, qos=0, label="S1"), False),
    ("S2", Scenario("fan-in", publishers=4, count=5000, qos=1, label="S2"), True),
    ("S3", Scenario("fan-out", subscribers=10, count=5000, qos=0, label="S3"), False),
    ("S4", Scenario("qos", count=2000, qos=2, label="S4"), False),
    ("S5", Scenario("storm", connections=5000, count=0, label="S5", timeout=120), False),
    ("L0", Scenario("latency", count=5000, rate=1000, qos=0, label="L0"), False),
    ("L1", Scenario("latency", count=5000, rate=1000, qos=1, label="L1"), False),
]
