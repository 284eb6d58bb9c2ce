"""What a job writes to its result file, as conditions and loops read it."""

from __future__ import annotations

from wloadctl.core.branches import UnusableResult
from wloadctl.procs.runctx import RESULT_LIMIT, parse_result, result_of_bytes


def test_key_value_lines_keep_text_that_is_not_written_as_a_number() -> None:
    got = parse_result('sort_code=012345\nstatus=NaN\nbatch=1_000\nname="John Smith"\nnick=\'jo\'\n'
                       "rows=5\nrate=0.5\nneg=-3\nbig=1e3\nzero=0\nempty=\n")
    assert got == {"sort_code": "012345", "status": "NaN", "batch": "1_000", "name": "John Smith", "nick": "jo",
                   "rows": 5, "rate": 0.5, "neg": -3, "big": 1000.0, "zero": 0, "empty": ""}


def test_a_byte_order_mark_first_is_no_part_of_the_result() -> None:
    assert result_of_bytes(b'\xef\xbb\xbf{"rows": 6}\n') == {"rows": 6}
    assert result_of_bytes(b"\xef\xbb\xbfrows=6\r\n") == {"rows": 6}


def test_no_result_an_empty_one_and_ones_that_cannot_be_read() -> None:
    assert result_of_bytes(None) == {} and result_of_bytes(b"\n") == {}
    for data, why in ((b"[1, 2]", "holds a JSON list"), (b"{oops", "is not valid JSON"),
                      (b"garbage", "neither a JSON object nor key=value lines"),
                      (b"x" * (RESULT_LIMIT + 1), "larger than 64 KiB"),
                      (b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests values more than 100 deep"),
                      (b'{"x": ' + b"[" * 100 + b"]" * 100 + b"}", "nests values more than 100 deep"),
                      (b'{"n": ' + b"9" * 5000 + b"}", "holds a number of more than 4300 digits"),
                      (b"n=" + b"9" * 5000, "'n' is a number of 5000 digits, more than the 4300"),
                      (b'{"amount": NaN}', "'amount' is NaN, not a number JSON can hold"),
                      (b'{"a": [1, {"b": Infinity}]}', "'a[1].b' is Infinity, not a number JSON can hold"),
                      (b'{"x": -1e999}', "'x' is -1e999, past ±1.8e308"),
                      (b"rows=1\nbig=1e999\n", "'big' is 1e999, past ±1.8e308")):
        got = result_of_bytes(data)
        assert isinstance(got, UnusableResult) and why in got.problem and got == {}, (data[:20], got)


def test_a_result_nested_as_deep_as_a_result_may_be_is_read() -> None:
    got = parse_result('{"x": ' + "[" * 99 + "]" * 99 + "}")
    assert not isinstance(got, UnusableResult) and list(got) == ["x"]


def test_the_largest_numbers_a_float_holds_are_read() -> None:
    assert parse_result('{"x": 1.7e308, "y": -1.7e308}') == {"x": 1.7e308, "y": -1.7e308}
    assert parse_result("x=1.7e308\nn=NaN\n") == {"x": 1.7e308, "n": "NaN"}


def test_every_line_of_key_value_lines_but_blanks_and_comments_is_key_value() -> None:
    assert parse_result("# totals of the load\n\nrows=5\n  # (eu only)\nregion=eu\n") == {"rows": 5, "region": "eu"}
    for text, why in (("garbage\n=oops\n", "line 1 has no '='"), ("k=1\ngarbage", "line 2 has no '='"),
                      ("rows=5\n=oops\n", "line 2 has no key before its '='"),
                      ("\n\nrows=5\n \t= 3", "line 4 has no key before its '='")):
        got = parse_result(text)
        assert isinstance(got, UnusableResult) and got == {}, (text, got)
        assert got.problem == f"its result file is neither a JSON object nor key=value lines: {why}", (text, got)
