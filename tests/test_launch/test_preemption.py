"""Preemption loses nothing: a stop signal (Slurm's USR1 warning, SIGTERM) reaching one rank of a
two-task job stops both after the same iteration with a checkpoint of it; ``--requeue`` has the job
requeue itself, and the requeued job resumes by itself. The whole round under a real Slurm, ending
with an uninterrupted run's weights, is in test_slurm.py."""
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger

import mmvisattn  # noqa: F401  (lets torch.load read Runner checkpoints)
from mmvisattn.engine.hooks import PreemptionHook
from mmvisattn.launch.options import enable_requeue, resume_of_requeued_job

from ..conftest import REPO, time_limit, tool_env
from .conftest import free_port
from .test_training_faults import RWGKA_DEMO, logged_losses

OPTIONS = ['train_cfg.max_iters=6', 'train_dataloader.batch_size=2',
           'default_hooks.logger.interval=1',
           'default_hooks.checkpoint.interval=100', 'model.backbone.drop_path_rate=0.2',
           'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False']


def start_tasks(work_dir, cwd) -> list:
    """Two tasks of a job as ``srun`` starts them: each its own process, ranks from the
    environment."""
    port = free_port()
    command = [sys.executable, str(REPO / 'tools/train.py'), str(RWGKA_DEMO), '--work-dir',
               str(work_dir), '--launcher', 'pytorch', '--cfg-options', *OPTIONS]
    return [subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True,
                             env=dict(tool_env(), RANK=str(rank), LOCAL_RANK=str(rank),
                                      WORLD_SIZE='2',
                                      MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port)))
            for rank in range(2)]


def finish(tasks) -> None:
    for task in tasks:
        _, stderr = task.communicate(timeout=time_limit(300))
        assert task.returncode == 0, stderr[-3000:]


def test_a_signal_to_one_rank_stops_both_after_the_same_iteration_with_its_checkpoint(
    workspace, tmp_path
):
    """Only one rank is signalled: the other learns it from the agreement, and both stop after the
    same iteration. (That the resumed run ends with an uninterrupted run's weights is proven under a
    real Slurm, in test_slurm.py.)"""
    tasks = start_tasks(tmp_path, workspace)
    deadline = time.time() + time_limit(300)
    while not logged_losses(tmp_path).get(2) and time.time() < deadline and tasks[1].poll() is None:
        time.sleep(0.05)
    tasks[1].send_signal(signal.SIGUSR1)
    finish(tasks)
    checkpoint = (tmp_path / 'last_checkpoint').read_text()
    step = int(checkpoint.rpartition('_')[2].split('.')[0])
    assert 2 <= step < 6 and sorted(path.name for path in tmp_path.glob('*.pth')) == [
        f'iter_{step}.pth'
    ]
    assert sorted(logged_losses(tmp_path)) == list(range(1, step + 1))
    # both ranks' states, for an exact resume
    assert len(torch.load(checkpoint)['random_states']) == 2


def test_requeue_asks_slurm_after_the_checkpoint(tmp_path, monkeypatch):
    calls = tmp_path / 'calls'
    scontrol = tmp_path / 'scontrol'
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv('PATH', f'{tmp_path}{os.pathsep}{os.environ["PATH"]}')
    monkeypatch.setenv('SLURM_JOB_ID', '4242')
    runner = SimpleNamespace(rank=0, logger=MMLogger.get_instance('preemption-test'))
    hook = PreemptionHook(requeue=True)
    hook.after_train(runner)
    assert not calls.exists()  # the run was not stopped by a signal: it finished
    hook.stopped_at = 3
    hook.after_train(SimpleNamespace(**dict(vars(runner), rank=1)))
    assert not calls.exists()  # rank 0 alone asks
    hook.after_train(runner)
    assert calls.read_text() == 'requeue 4242\n'


def test_the_requeue_flag_and_the_resume_of_a_requeued_job(monkeypatch):
    cfg = Config(dict(custom_hooks=[dict(type='RandomStateHook'), dict(type='PreemptionHook')]))
    enable_requeue(cfg)
    assert cfg.custom_hooks[1]['requeue'] is True
    with pytest.raises(SystemExit,
                       match=r"^error: --requeue needs a PreemptionHook in the config's "
                       r"custom_hooks"):
        enable_requeue(Config(dict(custom_hooks=[])))
    monkeypatch.delenv('SLURM_RESTART_COUNT', raising=False)
    assert resume_of_requeued_job(None) is None
    monkeypatch.setenv('SLURM_RESTART_COUNT', '0')
    assert resume_of_requeued_job(None) is None
    monkeypatch.setenv('SLURM_RESTART_COUNT', '1')
    assert resume_of_requeued_job(None) == 'auto' and resume_of_requeued_job('x.pth') == 'x.pth'


@pytest.mark.parametrize('arguments,message', [
    (dict(signals=['SIGNOPE']), r"signals \['SIGNOPE'\] are not signal names"),
    (dict(interval=0), 'interval=0; expected a positive number')])
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        PreemptionHook(**arguments)


def test_the_safeguards_register_it_in_every_run():
    assert json.dumps(Config.fromfile(str(RWGKA_DEMO)).custom_hooks).count('PreemptionHook') == 1


def test_a_second_sigterm_ends_the_process(tmp_path):
    """The first SIGTERM asks for a checkpoint and a stop; a second ends a run stuck in its
    iteration."""
    script = tmp_path / 'stuck.py'
    script.write_text('import os, signal, time\nfrom mmvisattn.engine.hooks import PreemptionHook\n'
                      'hook = PreemptionHook()\nhook.before_train(None)\n'
                      'os.kill(os.getpid(), signal.SIGTERM)\nprint(hook.received, flush=True)\n'
                      'os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(60)\n')
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=tool_env(), timeout=time_limit(120))
    assert done.stdout == 'SIGTERM\n' and done.returncode == -signal.SIGTERM, done.stderr[-2000:]
