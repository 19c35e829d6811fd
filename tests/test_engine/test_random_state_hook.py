"""RandomStateHook: states restored whatever device the checkpoint was mapped to, and gathered
across ranks only where a checkpoint is written."""
import io
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.hooks import CheckpointHook

from mmvisattn.engine import RandomStateHook
from mmvisattn.engine.hooks import random_state_hook
from mmvisattn.utils.random_states import (
    capture_random_states,
    generator_state,
    restore_random_states,
)

from ..conftest import DEVICES


def draws():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


@pytest.mark.parametrize('map_location', DEVICES)
def test_states_mapped_to_any_device_restore_the_same_draws(map_location):
    """mmengine's ``Runner.resume`` loads with ``map_location`` the training device, so on a GPU the
    saved generator states arrive as CUDA tensors, which ``torch.set_rng_state`` refuses."""
    buffer = io.BytesIO()
    torch.save(dict(random_states=[capture_random_states()]), buffer)
    expected = draws()
    buffer.seek(0)
    # allowlisted by mmvisattn
    states = torch.load(buffer, map_location=map_location)['random_states'][0]
    assert states['torch'].device.type == map_location
    restore_random_states(states)
    assert draws() == expected


def test_generator_states_become_cpu_bytes():
    state = torch.get_rng_state()
    for stored in (state.to(torch.int16), state[None][0], state.clone().requires_grad_(False)):
        restored = generator_state(stored)
        assert (
            restored.device.type == 'cpu'
            and restored.dtype == torch.uint8
            and torch.equal(restored, state)
        )


def runner_at(iteration: int, max_iters: int, *hooks) -> SimpleNamespace:
    return SimpleNamespace(iter=iteration, epoch=0, max_iters=max_iters, max_epochs=1,
                           hooks=list(hooks))


def test_ranks_gather_only_where_a_checkpoint_is_written(monkeypatch):
    """Two ranks, a checkpoint every third iteration and at the last: one gather at each of them
    (the hook gathered every iteration before, an ``all_gather_object`` a step)."""
    gathers = []
    monkeypatch.setattr(random_state_hook, 'get_world_size', lambda: 2)
    monkeypatch.setattr(random_state_hook, 'all_gather_object',
                        lambda states: gathers.append(states) or [states] * 2)
    hook, checkpoints = RandomStateHook(), CheckpointHook(interval=3, by_epoch=False)
    saved = {}
    for iteration in range(8):
        runner = runner_at(iteration, 8, checkpoints)
        hook.before_train_iter(runner, iteration)
        hook.after_train_iter(runner, iteration)
        checkpoint = {}
        hook.before_save_checkpoint(runner, checkpoint)
        saved[iteration] = 'random_states' in checkpoint
    assert len(gathers) == 3
    assert [iteration for iteration, has in saved.items() if has] == [2, 5, 7]


def test_a_best_checkpoint_after_validation_gets_the_training_states(monkeypatch):
    """With ``save_best`` the ranks gather before each validation (the stream validation must not
    shift); a single process saves the states it had before validating."""
    hook = RandomStateHook()
    runner = runner_at(4, 10, CheckpointHook(interval=100, by_epoch=False, save_best='auto'))
    hook.before_train_iter(runner, 4)
    hook.after_train_iter(runner, 4)
    hook.before_val(runner)
    before = torch.get_rng_state()
    torch.rand(5)  # validation draws
    checkpoint = {}
    hook.before_save_checkpoint(runner, checkpoint)
    assert torch.equal(checkpoint['random_states'][0]['torch'], before)
    hook.after_val(runner)
    gathers = []
    monkeypatch.setattr(random_state_hook, 'get_world_size', lambda: 2)
    monkeypatch.setattr(random_state_hook, 'all_gather_object',
                        lambda states: gathers.append(states) or [states] * 2)
    hook.before_train_iter(runner, 5)
    hook.before_val(runner)
    assert len(gathers) == 1
