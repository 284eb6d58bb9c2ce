"""URLs an operator gives (a journal's, a broker's): their parts, their faults in words, shown without password."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit


def split_url(url: str) -> SplitResult:
    """`url` split into its parts, its port read too.

    Raises:
        ValueError: what is wrong with it, in words fit for a one-line message (an unclosed IPv6
            bracket, a port that is not a number from 0 to 65535).
    """
    try:
        parts = urlsplit(url)
    except ValueError as e:
        if "IPv6" in str(e):
            raise ValueError("its host has an unclosed '[' or ']' (an IPv6 host is written [::1])") from None
        raise ValueError(str(e)[:1].lower() + str(e)[1:]) from None
    try:
        parts.port  # noqa: B018 - urllib reads the port only when asked, raising ValueError on a bad one
    except ValueError:
        port = parts.netloc.rpartition("]")[2].rpartition(":")[2]
        raise ValueError(f"port {port!r} is not a number from 0 to 65535") from None
    return parts


def without_password(url: str) -> str:
    """`url` as given, its password (if any) left out (what messages and hints show of a URL)."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    return f"{scheme}://{userinfo.split(':', 1)[0]}@{tail}"
