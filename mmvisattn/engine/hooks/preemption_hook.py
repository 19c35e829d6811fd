"""A checkpoint of the iteration a job was told to stop at, so that a preempted or timed-out job
loses nothing, and (asked for) a Slurm batch job that requeues itself."""
import os
import signal
import subprocess
from typing import Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.hooks import CheckpointHook, Hook
from mmengine.registry import HOOKS

from .random_state_hook import RandomStateHook, checkpoint_due


@HOOKS.register_module()
class PreemptionHook(Hook):
    """Stops training cleanly when the job is told it will be stopped: Slurm's warning signal
    (``sbatch --signal=USR1@120``) or the SIGTERM before a kill.

    The signal sets a flag (a second SIGTERM ends the process); the ranks agree on it over a CPU
    gloo group, all stop at the same iteration, ``CheckpointHook`` saves it and ``tools/train.py
    --resume`` continues exactly. An epoch-based loop (resumed at epoch boundaries only) stops
    without a checkpoint of its own.

    Args:
        signals: The signals that ask for a stop.
        requeue: After the checkpoint, rank 0 runs ``scontrol requeue $SLURM_JOB_ID`` (``sbatch``
            jobs only); ``tools/train.py`` resumes by itself when ``SLURM_RESTART_COUNT`` is set.
        interval: Agree every ``interval`` iterations (one small CPU all-reduce each time).
    """

    # after CheckpointHook: an interval checkpoint of this iteration is not written twice
    priority = 'LOWEST'

    def __init__(self, signals: Sequence[str] = ('SIGUSR1', 'SIGTERM'), requeue: bool = False,
                 interval: int = 1) -> None:
        unknown = [name for name in signals
                   if not isinstance(getattr(signal, str(name), None), signal.Signals)]
        if unknown or interval < 1:
            raise ValueError(f'PreemptionHook: signals {unknown} are not signal names' if unknown
                             else
                             f'PreemptionHook: interval={interval}; expected a positive number of '
                             'iterations')
        self.signals = [getattr(signal, name) for name in signals]
        self.requeue = requeue
        self.interval = interval
        self.received: Optional[str] = None
        self.stopped_at: Optional[int] = None
        self.group = None

    def before_train(self, runner) -> None:
        for number in self.signals:
            signal.signal(number, self._receive)
        if dist.is_available() and dist.is_initialized() and dist.get_backend() != 'gloo':
            # every rank, in the same order: a collective
            self.group = dist.new_group(backend='gloo')

    def _receive(self, number: int, frame) -> None:
        if self.received is not None and number == signal.SIGTERM:
            # asked twice: a run stuck inside its iteration still ends as SIGTERM ends a process
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
        self.received = signal.Signals(number).name

    def _agreed(self) -> bool:
        """Whether any rank has received a stop signal (every rank calls this together)."""
        flag = torch.tensor([int(self.received is not None)])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, group=self.group)
        return bool(flag.item())

    def after_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None,
                         outputs: Optional[dict] = None) -> None:
        if not self.every_n_train_iters(runner, self.interval) or not self._agreed():
            return
        step = runner.iter + 1
        checkpoints = [hook for hook in runner.hooks if isinstance(hook, CheckpointHook)]
        runner.logger.info(f'{self.received or "a stop signal on another rank"}: stopping after '
                           f'iteration {step}')
        if not checkpoints or checkpoints[0].by_epoch:
            runner.logger.warning('PreemptionHook: no checkpoint of this iteration: '
                                  + ('the loop resumes at epochs' if checkpoints
                                     else 'no CheckpointHook in this run'))
        elif not checkpoint_due(runner, by_epoch=False):  # else CheckpointHook has just written it
            for hook in runner.hooks:
                if isinstance(hook, RandomStateHook):  # its states go with every checkpoint
                    hook.gather_for_checkpoint()
            checkpoints[0]._save_checkpoint_with_step(runner, step,
                                                      dict(epoch=runner.epoch, iter=step))
        self.stopped_at = step
        runner.train_loop.stop_training = True

    def after_train(self, runner) -> None:
        if self.stopped_at is None or not self.requeue or runner.rank != 0:
            return
        job = os.environ.get('SLURM_JOB_ID')
        if job is None:
            runner.logger.warning('PreemptionHook: requeue asked for, but this is not a Slurm job '
                                  '(no SLURM_JOB_ID)')
            return
        done = subprocess.run(['scontrol', 'requeue', job], capture_output=True, text=True)
        said = (done.stderr or done.stdout).strip().replace('\n', ' ')
        runner.logger.info(f'requeued Slurm job {job}' if done.returncode == 0 else
                           f'PreemptionHook: scontrol requeue {job} failed: {said}')
