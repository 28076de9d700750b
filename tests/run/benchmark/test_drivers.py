"""Tests for tfmp/run/benchmark/drivers.py: rounds timed until the stop rule says enough."""

import math
import statistics
import types

import pytest

from tfmp.run.benchmark import drivers
from tfmp.run.benchmark.drivers import Driver, StopRule


def test_the_relative_interval_is_students_t_over_the_logs():
    values = [100.0, 102.0, 98.0, 101.0]
    logs = [math.log(v) for v in values]
    expected = math.expm1(3.182446 * statistics.stdev(logs) / 2)  # t(0.95, 3) = 3.1824
    assert drivers.relative_interval(values) == pytest.approx(expected, rel=1e-5)
    assert drivers.relative_interval([5.0, 5.0, 5.0]) == 0.0
    assert drivers.relative_interval([5.0]) is None


def test_a_fixed_count_stops_after_that_many_rounds_whatever_the_interval():
    rule = StopRule(repeats=4)
    assert not rule.done(3, 0.0, 1e6)
    assert rule.done(4, 0.5, 0.1)
    assert rule.eta(1, None, 2.0) == 6.0  # three rounds left at two seconds each


def test_timing_to_an_interval_stops_once_it_is_narrow_enough_after_the_fewest_rounds():
    rule = StopRule(interval=0.02, seconds=60.0, min_rounds=3)
    assert not rule.done(2, 0.001, 1.0)  # too few rounds, however narrow
    assert not rule.done(3, 0.021, 3.0)
    assert rule.done(3, 0.02, 3.0)


def test_timing_to_an_interval_stops_before_a_round_would_overrun_the_budget():
    rule = StopRule(interval=0.02, seconds=10.0, min_rounds=3)
    assert not rule.done(4, 0.05, 7.9)  # 7.9 s in, a fifth round ends near 9.9 s
    assert rule.done(4, 0.05, 8.1)  # a fifth round would end near 10.1 s
    assert rule.done(3, None, 30.0)  # the fewest rounds took longer than the budget: stop there


def test_the_eta_expects_the_interval_to_shrink_as_one_over_the_root_of_the_rounds():
    rule = StopRule(interval=0.02, seconds=100.0, min_rounds=3)
    # 4 rounds at +-4%: 16 rounds should reach +-2%, 12 more at 1 s each.
    assert rule.eta(4, 0.04, 4.0) == pytest.approx(12.0)
    assert StopRule(interval=0.02, seconds=10.0).eta(4, 0.04, 4.0) == pytest.approx(6.0)  # capped by the budget
    assert rule.eta(1, None, 1.0) == pytest.approx(2.0)  # before a width: the fewest rounds
    # A budget spent by the first round: the fewest rounds are timed all the same.
    assert StopRule(interval=0.02, seconds=10.0, min_rounds=3).eta(1, None, 30.0) == pytest.approx(60.0)


class _Clocked(Driver):
    """A driver whose rounds take no time and report the throughputs it is given, in turn."""

    def __init__(self, throughputs, step_seconds=None):
        super().__init__(lambda: None, (1,), 1)
        self.throughputs = list(throughputs)
        self.step_seconds = step_seconds
        self.steps = []

    def timed(self, steps):
        self.steps.append(steps)
        self.images_per_sec.append(self.throughputs[len(self.images_per_sec)])


def test_rounds_are_timed_until_the_paired_ratio_is_known_then_stop():
    # The ratio wobbles by about 1% round to round: +-2% is reached on the fourth round.
    trainer = _Clocked([100, 101, 99, 100, 100, 100, 100, 100])
    hand_written = _Clocked([100, 100, 100, 100.5, 100, 100, 100, 100])
    seen = []
    rounds = drivers.time_rounds(
        [trainer, hand_written], 3, StopRule(interval=0.02, seconds=60), lambda *a: seen.append(a)
    )
    widths = [width for _, width, _ in seen]
    assert rounds == 4 == len(seen) and trainer.steps == [3] * 4
    assert widths[0] is None and widths[2] > 0.02 >= widths[3]
    assert widths[3] == pytest.approx(drivers.relative_interval([1.0, 1.01, 0.99, 100 / 100.5]))


def test_a_noisy_row_stops_at_its_budget_not_its_interval(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(drivers, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    class Slow(_Clocked):  # each path's share of a round takes 2.5 s
        def timed(self, steps):
            now[0] += 2.5
            super().timed(steps)

    trainer = Slow([100, 130, 80, 120, 90, 110, 95, 105])
    hand_written = Slow([100] * 8)
    rounds = drivers.time_rounds([trainer, hand_written], 1, StopRule(interval=0.02, seconds=22))
    # 5 s a round: after the fourth (20 s in) a fifth would end at 25 s, past the budget; the ratio is still +-20%.
    assert rounds == 4 and now[0] == 20.0
    assert drivers.paired_interval([trainer, hand_written]) > 0.2


def test_a_round_lasts_about_round_seconds_on_the_slowest_path():
    assert drivers.steps_per_round([_Clocked([], 0.01), _Clocked([], 0.02)], 0.5) == 25
    assert drivers.steps_per_round([_Clocked([], 2.3)], 0.5) == 1  # a GAN step of seconds: one step a round
    assert drivers.steps_per_round([_Clocked([])], 0.5) == 1  # nothing measured


def test_a_warm_up_times_its_last_step_alone():
    driver = Driver(lambda: None, (4,), 1)
    driver.warm_up(3)
    assert driver.position == 3 and driver.step_seconds is not None and driver.images_per_sec == []
    fresh = Driver(lambda: None, (4,), 1)
    fresh.warm_up(0)
    assert fresh.position == 0 and fresh.step_seconds is None
