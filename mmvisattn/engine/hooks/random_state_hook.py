"""Exact resumption: the random-number states of every rank travel with each checkpoint."""
from typing import List, Optional

from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import CheckpointHook, Hook
from mmengine.registry import HOOKS
from mmengine.runner import IterBasedTrainLoop

from mmvisattn.utils.random_states import RandomStates, capture_random_states, restore_random_states


def checkpoint_due(runner, by_epoch: bool) -> bool:
    """Whether a ``CheckpointHook`` of the runner saves at the end of this iteration or epoch."""
    for hook in runner.hooks:
        if not isinstance(hook, CheckpointHook) or hook.by_epoch != by_epoch:
            continue
        if by_epoch:
            due = hook.every_n_epochs(runner, hook.interval, hook.save_begin) or (
                hook.save_last and hook.is_last_train_epoch(runner))
        else:
            due = hook.every_n_train_iters(runner, hook.interval, hook.save_begin) or (
                hook.save_last and hook.is_last_train_iter(runner))
        if due:
            return True
    return False


def saves_best(runner) -> bool:
    """Whether a ``CheckpointHook`` may save a best checkpoint after a validation."""
    return any(isinstance(hook, CheckpointHook) and hook.save_best for hook in runner.hooks)


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Save every rank's random-number states with each checkpoint and restore them on ``--resume``,
    so a resumed run draws the same dropout masks and augmentations as one that never stopped
    (bit-identical weights on CPU); mmengine 0.10.7 only re-seeds.

    The states are gathered to rank 0 into ``checkpoint['random_states']`` just before
    ``CheckpointHook`` (a best checkpoint gets the training stream's from before the validation,
    which leaves the states as it found them). On resume they are put back after
    ``IterBasedTrainLoop`` replays the batches already trained; a checkpoint without states, or from
    another number of ranks, is reported and resumes with mmengine's re-seeding.
    """

    priority = 'LOW'  # after the logger, before CheckpointHook (VERY_LOW)

    def __init__(self) -> None:
        # every rank's, for the checkpoint due now
        self._gathered: Optional[List[RandomStates]] = None
        self._loaded: Optional[List[RandomStates]] = None
        self._before_val: Optional[RandomStates] = None

    def _gather(self, states: RandomStates) -> None:
        """Distributed runs only: rank 0 alone saves, so it collects every rank's states; a single
        process takes its own when it saves."""
        if get_world_size() > 1:
            self._gathered = all_gather_object(states)

    def gather_for_checkpoint(self) -> None:
        """Take this rank's states for a checkpoint written now outside ``CheckpointHook``'s rule
        (``PreemptionHook``'s); every rank calls it at the same point (a collective)."""
        self._gather(capture_random_states())

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._gathered = None

    def before_train_epoch(self, runner) -> None:
        self._gathered = None

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if checkpoint_due(runner, by_epoch=False):
            self._gather(capture_random_states())

    def after_train_epoch(self, runner) -> None:
        if checkpoint_due(runner, by_epoch=True):
            self._gather(capture_random_states())

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if get_world_size() == 1:
            checkpoint['random_states'] = [self._before_val or capture_random_states()]
        elif self._gathered is not None:
            checkpoint['random_states'] = self._gathered

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._loaded = checkpoint.get('random_states')

    def before_train(self, runner) -> None:
        """Restore the states of a resumed run (one whose loop has progress); ``load_from`` only
        initialises weights and keeps the fresh run's seeding."""
        resumed = runner.iter > 0 or runner.epoch > 0
        states, self._loaded = self._loaded, None
        if not resumed:
            return
        if states is None or len(states) != get_world_size():
            reason = ('holds no random states' if states is None else
                      f'holds the random states of {len(states)} ranks, this run has '
                      f'{get_world_size()}')
            runner.logger.warning(f'RandomStateHook: the checkpoint {reason}; the resumed run is '
                                  're-seeded and its random draws differ from an uninterrupted run')
            return
        own = states[get_rank()]
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop) and loop.iter > 0:
            loop.dataloader_iterator = RestoreAfterReplay(loop, own, replayed=loop.iter)
        else:
            restore_random_states(own)

    def before_val(self, runner) -> None:
        self._before_val = capture_random_states()
        if self._gathered is None and saves_best(runner):
            self._gather(self._before_val)

    def after_val(self, runner) -> None:
        if self._before_val is not None:
            restore_random_states(self._before_val)
            self._before_val = None


class RestoreAfterReplay:
    """Stands in for the loop's ``dataloader_iterator`` while it replays ``replayed`` batches, then
    restores ``states`` and gives the loop its iterator back."""

    def __init__(self, loop: IterBasedTrainLoop, states: RandomStates, replayed: int) -> None:
        self.loop, self.states, self.remaining = loop, states, replayed
        self.iterator = loop.dataloader_iterator

    def __iter__(self) -> 'RestoreAfterReplay':
        return self

    def __next__(self):
        if self.remaining == 0:
            restore_random_states(self.states)
            self.loop.dataloader_iterator = self.iterator
        else:
            self.remaining -= 1
        return next(self.iterator)
