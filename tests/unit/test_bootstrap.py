"""parse_bootstrap: the forms it accepts and the errors it names."""

from __future__ import annotations

import pytest

from client.bootstrap import format_bootstrap, parse_bootstrap


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("localhost:9092", [("localhost", 9092)]),
        ("a:1,b:2", [("a", 1), ("b", 2)]),
        (" a:1 , b:2 ,", [("a", 1), ("b", 2)]),
        ("a:1,a:1,b:2", [("a", 1), ("b", 2)]),
        (["a:1", "b:2"], [("a", 1), ("b", 2)]),
        (["a:1,b:2", "c:3"], [("a", 1), ("b", 2), ("c", 3)]),
        ([("a", 1), ("b", 2)], [("a", 1), ("b", 2)]),
        ([("a", "3")], [("a", 3)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("10.0.0.1:65535", [("10.0.0.1", 65535)]),
    ],
)
def test_parses(given, expected):
    assert parse_bootstrap(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "no bootstrap servers"),
        (",", "no bootstrap servers"),
        ([], "no bootstrap servers"),
        ("localhost", "has no port"),
        ("host:", "not a number"),
        ("host:abc", "not a number"),
        (":9092", "empty host"),
        ("host:0", "outside 1..65535"),
        ("host:70000", "outside 1..65535"),
        ("::1:9092", "brackets"),
        ("[::1]9092", "ipv6-address"),
        ([("a", True)], "not a number"),
        ([42], "host:port"),
        (42, "string or a list"),
    ],
)
def test_rejects_with_a_clear_message(given, message):
    with pytest.raises(ValueError, match=message):
        parse_bootstrap(given)


def test_error_names_the_entry():
    with pytest.raises(ValueError, match="'b:x'"):
        parse_bootstrap("a:1,b:x")


def test_format_round_trips():
    addresses = [("a", 1), ("::1", 2)]
    assert format_bootstrap(addresses) == "a:1,[::1]:2"
    assert parse_bootstrap(format_bootstrap(addresses)) == addresses
