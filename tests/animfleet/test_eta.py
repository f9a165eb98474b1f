import pytest

from animfleet.jobview import estimate_start


def test_position_zero_waits_for_the_running_job_to_finish() -> None:
    # One GPU, a 100 s job with 80 % of its steps left: the next job starts in 80 s, not now.
    assert estimate_start(0, 100.0, 1, 1000.0, running_left_s=[80.0]) == pytest.approx(1080.0)
    assert estimate_start(1, 100.0, 1, 1000.0, running_left_s=[80.0]) == pytest.approx(1180.0)


def test_idle_gpus_start_jobs_now_and_busy_ones_free_in_turn() -> None:
    assert estimate_start(0, 10.0, 2, 0.0, running_left_s=[5.0]) == 0.0  # one GPU idle
    # Two busy GPUs free at 3 s and 7 s; jobs ahead take the first free one for 10 s.
    assert estimate_start(1, 10.0, 2, 0.0, running_left_s=[3.0, 7.0]) == pytest.approx(7.0)
    assert estimate_start(2, 10.0, 2, 0.0, running_left_s=[3.0, 7.0]) == pytest.approx(13.0)


def test_no_estimate_without_history_or_gpus() -> None:
    assert estimate_start(3, None, 2, 0.0) is None
    assert estimate_start(3, 10.0, 0, 0.0) is None
    assert estimate_start(4, 10.0, 2, 0.0) == pytest.approx(20.0)  # the old rule, all idle
