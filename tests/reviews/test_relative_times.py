"""`times_steady_until`: the first time a relative time the inbox prints reads differently, which
is when an inbox poll's version stops holding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reviews.templatetags.reviews_tags import time_left, times_steady_until, waited

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def steady(*, deadlines=(), sinces=()):  # type: ignore[no-untyped-def]
    until = times_steady_until(deadlines=deadlines, sinces=sinces, now=NOW)
    return None if until is None else (until - NOW).total_seconds()


def test_nothing_printed_holds_forever():
    assert steady() is None


def test_seconds_change_every_second():
    assert steady(sinces=[NOW - timedelta(seconds=12, milliseconds=250)]) == 0.75
    assert steady(deadlines=[NOW + timedelta(seconds=40, milliseconds=250)]) == 0.25


def test_minutes_change_at_the_next_whole_minute_up_or_down():
    # Waiting 5 min 10 s: 'waiting 5 min' until 6 min, 50 s from now.
    assert steady(sinces=[NOW - timedelta(minutes=5, seconds=10)]) == 50
    # 30 min 20 s left: '30 min left' until 30 min are left, 20 s from now.
    assert steady(deadlines=[NOW + timedelta(minutes=30, seconds=20)]) == 20
    # Overdue 3 min 5 s: rises like a wait.
    assert steady(deadlines=[NOW - timedelta(minutes=3, seconds=5)]) == 55


def test_days_change_at_the_next_whole_day():
    assert steady(sinces=[NOW - timedelta(days=3, hours=1)]) == 23 * 3600


def test_the_earliest_change_wins_and_the_text_is_the_same_just_before_it():
    deadlines = [NOW + timedelta(minutes=30, seconds=20)]
    sinces = [NOW - timedelta(minutes=5, seconds=10), NOW - timedelta(hours=2, seconds=59)]
    seconds = steady(deadlines=deadlines, sinces=sinces)
    assert seconds == 1

    def printed(at: datetime) -> list[str]:
        from unittest import mock

        with mock.patch("django.utils.timezone.now", return_value=at):
            return [time_left(d) for d in deadlines] + [waited(s) for s in sinces]

    before = NOW + timedelta(seconds=seconds - 0.001)
    after = NOW + timedelta(seconds=seconds)
    assert printed(NOW) == printed(before) != printed(after)
