"""mmvisattn.analysis.timing: the one timing loop (warm-up calls, the order reversed every other
round, the budget) and the one peak-memory reader (on CPU, the growth of the resident set's
high-water mark)."""
import subprocess
import sys
import time

from mmvisattn.analysis import timing


def test_rounds_warm_up_alternate_and_count():
    calls = []
    steps = {name: (lambda n: lambda: calls.append(n))(name) for name in 'ab'}
    times = timing.rounds(steps, 4, warm_up=2)
    assert calls == ['a', 'a', 'b', 'b'] + ['a', 'b', 'b', 'a'] * 2
    assert {name: len(seconds) for name, seconds in times.items()} == {'a': 4, 'b': 4}
    assert all(t >= 0 for seconds in times.values() for t in seconds)


def test_rounds_stop_at_the_budget_after_three():
    times = timing.rounds({'sleep': lambda: time.sleep(0.01)}, 100, budget=0.0, warm_up=0)
    assert len(times['sleep']) == 3


def test_median_ms_times_the_step():
    assert 9.0 <= timing.median_ms(lambda: time.sleep(0.01), 3, warm_up=0) < 100.0


# in a process of its own, as the benchmarks measure: a long-lived process may serve the step from
# pages it freed earlier and still holds, which the resident set does not count again
PEAK_CHILD = """
import torch
from mmvisattn.analysis import timing

def hold():
    held = torch.ones(64 * 2 ** 20 // 4)  # 64 MiB, written so that the pages are resident
    del held

timing.peak_growth_mb(hold)  # the allocator's first pages
print(timing.peak_growth_mb(hold), timing.peak_growth_mb(lambda: None))
"""


def test_peak_growth_counts_what_a_step_holds_at_its_peak():
    done = subprocess.run([sys.executable, '-c', PEAK_CHILD], capture_output=True, text=True,
                          check=True)
    held, nothing = map(float, done.stdout.split())
    assert 60 <= held <= 80 and nothing < 8
