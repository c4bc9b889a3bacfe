"""A session's ids come from the system's generator, fetched a few kB at a time: each
call still gives fresh digits, of the length asked, across refills."""

from __future__ import annotations

import string

from netclaw.sessions._shell.actor import RandomHex


def test_ids_are_hex_of_the_length_asked_and_never_repeat_across_refills() -> None:
    ids = RandomHex()
    seen = [ids(20) for _ in range(2_000)]  # 40,000 digits: ten refills of 4,096
    assert all(len(i) == 20 and set(i) <= set(string.hexdigits.lower()) for i in seen)
    assert len(set(seen)) == len(seen)


def test_odd_and_large_lengths() -> None:
    ids = RandomHex()
    assert len(ids(3)) == 3
    assert len(ids(4_095)) == 4_095  # past what is left: a fresh batch
    assert len(ids(10_001)) == 10_001  # larger than a batch
    assert ids(12) != ids(12)
