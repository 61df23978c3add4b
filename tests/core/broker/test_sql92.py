"""SQL92 filter expressions: RocketMQ 4.9 semantics, error positions, and a fuzz of the parser."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.broker.sql92 import MAX_DEPTH, Sql92Error, Sql92Filter, compile_sql92

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PROPS = {"a": "5", "b": "abc", "TAGS": "TagA", "f": "2.5", "big": "3000000000", "t": "TRUE", "q": "it's"}


@pytest.mark.parametrize("expr, expected", [
    # numeric comparisons convert the property to the constant's type
    ("a > 3", True), ("a >= 5", True), ("a < 5", False), ("a <= 5", True), ("a = 5", True), ("a <> 5", False),
    ("a > -5", True), ("a = 5.0", True), ("f > 2.0", True), ("f = 2.5", True), ("big > 5L", None),
    ("big > 3000000000", False), ("big = 3000000000", True),
    ("a BETWEEN 1 AND 5", True), ("a BETWEEN 6 AND 9", False), ("a NOT BETWEEN 1 AND 4", True),
    # character comparisons
    ("b = 'abc'", True), ("b <> 'abc'", False), ("b = 'ABC'", False), ("q = 'it''s'", True),
    ("b IN ('x', 'abc')", True), ("b NOT IN ('abc')", False), ("TAGS IN ('TagA', 'TagB')", True),
    ("TAGS = 'TagA'", True),
    # NULL and missing properties: unknown, so no match
    ("c IS NULL", True), ("c IS NOT NULL", False), ("a IS NOT NULL", True), ("c = 'x'", None), ("c > 1", None),
    ("c IN ('x')", None), ("NOT (c = 'x')", None), ("c = 'x' OR a = 5", True), ("c = 'x' AND a = 5", None),
    ("c = 'x' AND a = 6", False),
    # a value that is not a number aborts the whole evaluation (RocketMQ's exception path)
    ("b > 3", None), ("b > 3 OR a = 5", None), ("a = 5 OR b > 3", True), ("f > 2", None), ("big > 5", None),
    # boolean constants and casts
    ("TRUE", True), ("FALSE", False), ("NULL", None), ("t = TRUE", True), ("a = TRUE", False), ("a", False),
    ("NOT (a = 5)", False), ("NOT FALSE", True), ("NOT a = 'x'", None),
    # case-insensitive keywords, comments
    ("a > 3 and b in ('abc') or c is null", True), ("-- note\na > 1 /* more */", True),
])
def test_evaluation_follows_rocketmq(expr, expected):
    f = compile_sql92(expr)
    assert f.evaluate(PROPS) is expected
    assert f.matches(PROPS) is (expected is True)


@pytest.mark.parametrize("expr, column, words", [
    ("", 1, "expected a value"),
    ("a >", 4, "expected a value"),
    ("a > 'x'", 3, "cannot be compared"),
    ("a = NULL", 3, "IS NULL"),
    ("5", 1, "boolean"),
    ("a BETWEEN 5 AND 1", 3, "reversed"),
    ("a > 0.0", 5, "less than"),
    ("'x' IN ('a')", 5, "property"),
    ("a IN (1)", 7, "string constants"),
    ("a = 1 b", 7, "after a complete expression"),
    ("(a = 1", 7, "expected ')'"),
    ("a ! 1", 3, "unexpected character '!'"),
    ("a = 'abc", 5, "unterminated string"),
    ("a = 1 /* x", 7, "unterminated /* comment"),
    ("a IS 5", 6, "NULL or NOT NULL"),
    ("a BETWEEN 1 5", 13, "AND in BETWEEN"),
    ("99999999999999999999 > a", 1, "Long range"),
])
def test_errors_name_the_column(expr, column, words):
    with pytest.raises(Sql92Error) as info:
        compile_sql92(expr)
    assert info.value.column == column
    assert words in str(info.value)
    assert str(info.value).startswith(f"SQL92 syntax error at column {column}: ")
    assert "\n" not in str(info.value)


def test_errors_on_later_lines_name_line_and_column():
    with pytest.raises(Sql92Error) as info:
        compile_sql92("a = 1\n AND > 2")
    assert (info.value.line, info.value.column, info.value.offset) == (2, 6, 11)
    assert "line 2, column 6" in str(info.value)


def test_compiled_filters_and_errors_are_cached_by_text():
    assert compile_sql92("a > 1") is compile_sql92("a > 1")
    with pytest.raises(Sql92Error) as one:
        compile_sql92("a >> 1")
    with pytest.raises(Sql92Error) as two:
        compile_sql92("a >> 1")
    assert one.value is two.value


def test_depth_is_bounded():
    deep = " OR ".join(["a = 1"] * (MAX_DEPTH + 5))
    with pytest.raises(Sql92Error, match="nested too deeply"):
        compile_sql92(deep)
    nested = "(" * 2000 + "a = 1" + ")" * 2000
    with pytest.raises(Sql92Error):
        compile_sql92(nested)


# ---------------------------------------------------------------- fuzz

_WORDS = ["a", "b", "TAGS", "AND", "OR", "NOT", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "IN", "=", "<>", ">", ">=",
          "<", "<=", "(", ")", ",", "+", "-", "'x'", "'it''s'", "1", "0", "5L", "2.5", ".5", "1e3", "3000000000",
          "--c\n", "/*c*/", "'", "/*", "!", "$v", "1.7976931348623157e309"]


@FAST
@given(st.text(max_size=60))
def test_fuzz_any_text_compiles_or_raises_sql92error(text):
    try:
        f = compile_sql92(text)
    except Sql92Error as e:
        assert 0 <= e.offset <= len(text)
        assert "\n" not in str(e)
        return
    assert isinstance(f, Sql92Filter)


@FAST
@given(st.lists(st.sampled_from(_WORDS), max_size=14),
       st.dictionaries(st.sampled_from(["a", "b", "TAGS", "$v"]),
                       st.one_of(st.text(max_size=5), st.sampled_from(["1", "-2", "2.5", "NaN", "true", "1e400"])),
                       max_size=4))
def test_fuzz_token_soup_compiles_or_raises_and_evaluation_never_raises(words, props):
    text = " ".join(words)
    try:
        f = compile_sql92(text)
    except Sql92Error as e:
        assert 0 <= e.offset <= len(text)
        return
    assert f.evaluate(props) in (True, False, None)
    assert f.matches(props) in (True, False)
