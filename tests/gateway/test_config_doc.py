"""docs/CONFIG.md lists every configuration key the code accepts, and no other.

The keys come from the code's own tables (BrokerConfig metadata, StoreConfig
fields, the [mqtt] owners' key sets, the timer keys), so a key added without
documentation, or documented but gone, fails here.
"""

import re
from pathlib import Path

from core.broker import BrokerConfig
from core.broker.config import _camel, _store_fields
from gateway.auth import SECURITY_KEYS
from gateway.config import _TOP_KEYS, PROXY_KEYS, TABLES
from gateway.http import HTTP_KEYS
from gateway.http.events_settings import EVENTS_KEYS
from gateway.logs import LOG_KEYS
from gateway.limits import LIMIT_KEYS
from gateway.listeners import LISTENER_KEYS
from core.timers import TimerConfig
from gateway.serve import _TIMER_KEYS, TIMER_MAX_DELAY_LIMIT_S, TIMER_ROLL_WINDOW_LIMIT
from gateway.settings import SESSION_KEYS
from gateway.tracing import TRACE_KEYS

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"


def documented() -> set[str]:
    return set(re.findall(r"^\| `([A-Za-z0-9]+)` \|", DOC.read_text(), re.M))


def accepted() -> set[str]:
    keys = set(BrokerConfig.keys()) | {_camel(n) for n in _store_fields()} | set(_TIMER_KEYS)
    keys |= set(LISTENER_KEYS) | set(SECURITY_KEYS) | set(LIMIT_KEYS) | set(SESSION_KEYS) | set(HTTP_KEYS)
    keys |= set(LOG_KEYS) | set(TRACE_KEYS) | set(PROXY_KEYS) | set(EVENTS_KEYS)
    keys |= (set(_TOP_KEYS) - set(TABLES)) | {"listenPort"}
    return keys


def test_every_accepted_key_is_documented():
    assert accepted() - documented() == set()


def test_every_documented_key_is_accepted():
    assert documented() - accepted() == set()


def row(key: str) -> str:
    return re.search(rf"^\| `{key}` \|.*$", DOC.read_text(), re.M).group(0)


def test_timer_rows_state_the_defaults_and_ranges_the_code_enforces():
    c = TimerConfig()
    assert row("timerWheelEnable").startswith(f"| `timerWheelEnable` | `{str(c.enabled).lower()}` |")
    assert row("timerPrecisionMs").startswith(f"| `timerPrecisionMs` | `{c.precision_ms}` |")
    assert "100, 200, 500 or 1000" in row("timerPrecisionMs")
    assert row("timerMaxDelaySec").startswith(f"| `timerMaxDelaySec` | `{c.max_delay_s}` |")
    assert f"1..{TIMER_MAX_DELAY_LIMIT_S}" in row("timerMaxDelaySec")
    assert f"1..{TIMER_ROLL_WINDOW_LIMIT}" in row("timerRollWindowSlot")


def test_the_timer_section_links_the_guide_which_names_every_timer_and_transaction_key():
    text = DOC.read_text()
    section = text[text.index("### `[broker]`: timer messages"):text.index("## `[namesrv]`")]
    assert "(TRANSACTIONS_AND_TIMERS.md)" in section
    guide = (DOC.parent / "TRANSACTIONS_AND_TIMERS.md").read_text()
    keys = set(_TIMER_KEYS) | {k for k in BrokerConfig.keys() if k.startswith("transaction")}
    assert {k for k in keys if not re.search(rf"`{k}\b", guide)} == set()
    assert keys <= documented()
