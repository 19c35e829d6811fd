"""The suite's subprocess limits: scaled by MMVISATTN_TEST_TIMEOUT_SCALE, and a time-out names the
command and the limit instead of a bare TimeoutExpired traceback."""
import pytest

from ..conftest import TIMEOUT_SCALE_VARIABLE, run_command, time_limit


def test_limits_scale_with_the_variable(monkeypatch):
    monkeypatch.setenv(TIMEOUT_SCALE_VARIABLE, '2.5')
    assert time_limit(600) == 1500


def test_time_out_names_the_command_and_the_limit(monkeypatch):
    monkeypatch.setenv(TIMEOUT_SCALE_VARIABLE, '0.5')
    with pytest.raises(pytest.fail.Exception) as failure:
        run_command(['sleep', '10'], timeout=0.4)
    assert str(failure.value) == ('sleep 10 did not finish within 0.2 s (0.4 s x '
                                  f'{TIMEOUT_SCALE_VARIABLE}=0.5); '
                                  f'on a slow or loaded machine raise {TIMEOUT_SCALE_VARIABLE}')


def test_a_bad_scale_is_named(monkeypatch):
    monkeypatch.setenv(TIMEOUT_SCALE_VARIABLE, 'fast')
    with pytest.raises(pytest.UsageError,
                       match="MMVISATTN_TEST_TIMEOUT_SCALE='fast' is not a number"):
        time_limit(1)
