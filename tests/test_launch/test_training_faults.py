"""Faults while training: a non-finite loss stops the run naming the iteration (no NaN checkpoint
is written), and a run killed at a checkpoint resumes exactly, random draws included."""
import os
import signal
import subprocess
import sys
import time

import torch

import mmvisattn  # noqa: F401  (lets torch.load read Runner checkpoints)

from ..conftest import REPO, run_tool, time_limit, tool_env
from .conftest import ONE_ITERATION, SEG_DEMO, fails_in_one_line, logged_losses

RWGKA_DEMO = (
    REPO / 'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'
)


def test_nan_loss_stops_the_run_at_its_iteration(small_data):
    work = small_data / 'work'
    line = fails_in_one_line(['tools/train.py', SEG_DEMO, '--work-dir', work, *ONE_ITERATION,
                              'model.decode_head.loss_decode.loss_weight=nan'], small_data, work)
    assert (line == 'error: training stopped: the loss is not finite at iteration 1 (loss nan, '
            'decode.loss_ce nan)')
    assert not list(work.glob('*.pth'))


# Drop-path, dropout and random augmentation on; every iteration logged; a checkpoint every 3.
# the seed unset, as a config may leave it (the demos set theirs): a resumed run takes the killed
# run's drawn seed
RESUME_OPTIONS = ['train_cfg.max_iters=8', 'train_dataloader.batch_size=2',
                  'default_hooks.logger.interval=1', 'default_hooks.checkpoint.interval=3',
                  'default_hooks.checkpoint.max_keep_ckpts=-1', 'model.backbone.drop_rate=0.1',
                  'model.backbone.drop_path_rate=0.2', 'randomness.seed=None']


def names_checkpoint(work_dir, checkpoint: str) -> bool:
    """Whether ``last_checkpoint`` names ``checkpoint``: CheckpointHook writes it once the file is
    complete, and ``--resume`` reads it."""
    last = work_dir / 'last_checkpoint'
    return last.exists() and last.read_text().endswith(checkpoint)


def kill_after_checkpoint(config, work_dir, cwd, checkpoint: str) -> None:
    """Start training and SIGKILL it as soon as ``checkpoint`` is saved."""
    command = [sys.executable, str(REPO / 'tools/train.py'), str(config), '--work-dir',
               str(work_dir), '--cfg-options', *RESUME_OPTIONS]
    process = subprocess.Popen(command, cwd=cwd, env=tool_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + time_limit(300)
    while not names_checkpoint(work_dir,
                               checkpoint) and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert names_checkpoint(work_dir, checkpoint) and not (work_dir / 'iter_8.pth').exists(), \
        'the run was not killed between its checkpoint and its end'


def test_killed_run_resumes_exactly(workspace, tmp_path):
    """Uninterrupted vs killed after iteration 3 and resumed with ``--resume``: the same loss at
    every iteration and bit-identical weights; the seed is left at None (RESUME_OPTIONS)."""
    straight, killed = tmp_path / 'straight', tmp_path / 'killed'
    kill_after_checkpoint(RWGKA_DEMO, killed, workspace, 'iter_3.pth')
    seed = torch.load(killed / 'iter_3.pth')['meta']['seed']  # drawn at random by the killed run
    run_tool(['tools/train.py', RWGKA_DEMO, '--work-dir', straight, '--cfg-options',
              *RESUME_OPTIONS, f'randomness.seed={seed}'], cwd=workspace)
    resumed = run_tool(['tools/train.py', RWGKA_DEMO, '--work-dir', killed, '--resume',
                        '--cfg-options', *RESUME_OPTIONS], cwd=workspace)
    assert 'resumed epoch: 0, iter: 3' in resumed.stdout + resumed.stderr
    expected, got = logged_losses(straight), logged_losses(killed)
    assert sorted(got) == list(range(1, 9)) and all(got[i] == expected[i] for i in got), (
        expected,
        got,
    )
    reference = torch.load(straight / 'iter_8.pth')['state_dict']
    result = torch.load(killed / 'iter_8.pth')['state_dict']
    assert reference.keys() == result.keys()
    assert all(torch.equal(reference[key], result[key]) for key in reference)


# Loaded at start-up by the Python of the run below (sitecustomize on PYTHONPATH): the second
# checkpoint torch.save writes stops half-way through and the process is SIGKILLed, as a kill
# arriving while the file is written.
KILL_WHILE_SAVING = '''
import io, os, signal
import torch

_save, _checkpoints = torch.save, []


def save(obj, f, *args, **kwargs):
    if not (isinstance(obj, dict) and 'state_dict' in obj):
        return _save(obj, f, *args, **kwargs)
    _checkpoints.append(obj)
    if len(_checkpoints) < 2:
        return _save(obj, f, *args, **kwargs)
    buffer = io.BytesIO()
    _save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()[:buffer.tell() // 2]
    if hasattr(f, 'write'):
        f.write(data)
        f.flush()
    else:
        with open(f, 'wb') as file:
            file.write(data)
    os.kill(os.getpid(), signal.SIGKILL)


torch.save = save
'''


def test_a_kill_while_a_checkpoint_is_written_leaves_the_previous_one_to_resume(
    workspace, tmp_path
):
    """Checkpoints at iterations 3 and 6, one kept: killed half-way through writing iter_6.pth, the
    run leaves iter_3.pth whole and named by ``last_checkpoint``; ``--resume`` continues from it to
    the weights of an uninterrupted run, removes the partial file and keeps only the newest
    checkpoint."""
    options = [*RESUME_OPTIONS, 'default_hooks.checkpoint.max_keep_ckpts=1']
    straight, killed, hooks = tmp_path / 'straight', tmp_path / 'killed', tmp_path / 'hooks'
    hooks.mkdir()
    (hooks / 'sitecustomize.py').write_text(KILL_WHILE_SAVING)
    env = tool_env()
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(hooks), env.get('PYTHONPATH')]))
    command = [sys.executable, str(REPO / 'tools/train.py'), str(RWGKA_DEMO), '--work-dir',
               str(killed), '--cfg-options', *options]
    done = subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=time_limit(300))
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert names_checkpoint(killed, 'iter_3.pth') and (killed / 'iter_3.pth').is_file()
    assert not (killed / 'iter_6.pth').exists()
    assert len(list(killed.glob('.iter_6.pth.*.partial'))) == 1
    seed = torch.load(killed / 'iter_3.pth')['meta']['seed']  # whole: it loads
    run_tool(['tools/train.py', RWGKA_DEMO, '--work-dir', straight, '--cfg-options', *options,
              f'randomness.seed={seed}'], cwd=workspace)
    resumed = run_tool(['tools/train.py', RWGKA_DEMO, '--work-dir', killed, '--resume',
                        '--cfg-options', *options],
                       cwd=workspace)
    assert 'resumed epoch: 0, iter: 3' in resumed.stdout + resumed.stderr
    assert sorted(path.name for path in killed.glob('*.pth')) == ['iter_8.pth']
    assert not list(killed.glob('.*.partial'))
    reference = torch.load(straight / 'iter_8.pth')['state_dict']
    result = torch.load(killed / 'iter_8.pth')['state_dict']
    assert reference.keys() == result.keys() and all(
        torch.equal(reference[key], result[key]) for key in reference
    )
