"""The typed progress record (core.base.progress): what every job kind reports and every bar shows."""

import json
import math

import pytest

from core.base.progress import UNITS, Progress, Stage


def test_a_counted_stage_fills_the_bar_and_says_its_unit():
    p = Progress("attention", 300, 1200, 150.0, 6.0, "batch 3/12")
    assert p.stage is Stage.ATTENTION and p.counted and p.fraction == 0.25
    assert (p.title, p.unit, p.rate_unit) == ("attention pass", "tokens", "tokens")
    assert Progress(Stage.TRAIN, 10, 100).unit == "steps" and Progress(Stage.TRAIN).rate_unit == "tokens"
    assert Progress("forward", 2000, 1000).fraction == 1.0  # never past full
    assert all(Progress(s, 1, 2).counted for s in UNITS)


def test_other_stages_are_a_line_of_text():
    assert not Progress(Stage.LOAD, 0, 1).counted and Progress(Stage.LOAD, 0, 1).fraction == 0.0
    assert Progress(Stage.METRICS, message="the chain pass").fraction == 1.0  # uncounted: after a pass
    assert Progress(Stage.METRICS, message="the chain pass").step == ""  # not a run's step 5
    assert not Progress(Stage.FORWARD, 0, 0).counted  # nothing to count yet


def test_values_are_checked_once_at_the_boundary():
    p = Progress("forward", -3, 10, float("nan"), float("inf"), None)
    assert (p.done, p.rate, p.eta_s, p.message) == (0, 0.0, None, "")
    with pytest.raises(ValueError):
        Progress("forwards", 1, 2)
    with pytest.raises(AttributeError):
        p.done = 4  # frozen


def test_json_round_trip():
    p = Progress(Stage.SERIES, 2, 5, 0.5, 6.0, "checkpoint 3/5 (step 4)")
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert d["stage"] == "series" and Progress.from_dict(d) == p


def test_a_rate_from_the_elapsed_time_when_the_kind_gives_none():
    p = Progress(Stage.ABLATION, 2, 7).with_rate(10.0)
    assert p.rate == pytest.approx(0.2) and p.eta_s == pytest.approx(25.0)
    given = Progress(Stage.FORWARD, 10, 20, 5.0, 2.0)
    assert given.with_rate(100.0) == given  # the kind's own rate wins
    assert Progress(Stage.ABLATION, 0, 7).with_rate(10.0).rate == 0.0 and math.isfinite(p.eta_s)


def test_the_steps_of_a_run_are_numbered():
    assert Progress("read").step == "step 1 of 5" and not Progress("read").counted
    assert Progress("read", 12, 12).counted and Progress("read", 12, 12).fraction == 1.0
    assert Progress(Stage.METRICS, 3, 12).fraction == 0.25 and Progress(Stage.METRICS, 3, 12).step == "step 5 of 5"
    assert Progress("load").step == "step 2 of 5" and Progress("attention", 1, 2).step == "step 4 of 5"
    assert Progress("train", 1, 2).step == "" and Progress("metrics").step == ""


def test_a_multi_run_jobs_bar_is_its_share_of_the_whole_work():
    """Issue 36: a reproduction's bar was full at "run 3 of 6". Runs weigh their tokens; the current run's
    progress counts inside its share; the bar reads `overall` when a job gives it, and it survives JSON."""
    from core.base.progress import overall, run_fraction

    steps = [Progress("read"), Progress("load"), Progress("tokenize"), Progress("forward", 10, 100),
             Progress("forward", 100, 100), Progress("metrics", 1, 7), Progress("metrics", 7, 7)]
    fr = [run_fraction(p) for p in steps]
    assert fr == sorted(fr) and fr[0] < 0.1 and fr[-1] == 1.0  # monotone through a run's stages
    w = [100.0] * 6
    third = overall(sum(w[:2]), sum(w), w[2], Progress("forward", 50, 100))  # run 3 of 6, half its pass done
    assert 2 / 6 < third < 3 / 6
    p = Progress("forward", 100, 100, overall=third)
    assert p.fraction == pytest.approx(third) and Progress.from_dict(p.to_dict()) == p
    assert Progress("forward", 100, 100).fraction == 1.0  # a single run: its stage's bar, as before
    assert overall(0, 300.0, 100.0, Progress("metrics", 7, 7)) == pytest.approx(1 / 3)
    assert Progress("forward", 1, 2, overall=float("nan")).overall is None  # bad input is unknown
    assert Progress("forward", 1, 2, overall=7).overall == 1.0
