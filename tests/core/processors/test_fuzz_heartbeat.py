"""Fuzz: heartbeat parsing raises only HeartbeatError for any JSON document."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.processors.clients import HeartbeatError, parse_heartbeat

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["clientID", "consumerDataSet", "producerDataSet", "groupName", "consumeType",
                         "messageModel", "consumeFromWhere", "subscriptionDataSet", "topic", "subString",
                         "tagsSet", "codeSet", "subVersion"]), children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
@example({"clientID": "x", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "t", "codeSet": ["a"]}]}]})
@example({"clientID": "x", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": "t", "codeSet": 5}]}]})
@example({"clientID": "x", "producerDataSet": 5})
@example({"clientID": "x", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [5]}]})
def test_any_document(doc):
    try:
        parse_heartbeat(doc)
    except HeartbeatError:
        pass
