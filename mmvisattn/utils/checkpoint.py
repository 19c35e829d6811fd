"""Checkpoints read with one-line errors, written so a kill at any moment leaves every named one
whole, and the converters' check that a state dict fits a config's backbone."""
import argparse
import functools
import os
import os.path as osp
import pickle
import re
import zipfile
from collections import OrderedDict
from typing import IO, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the one-line message names the file and the fault."""


REFUSED_GLOBAL = re.compile(r'Unsupported global: GLOBAL (\S+)|Trying to load unsupported GLOBAL '
                            r'(\S+)')


def read_checkpoint(path: str, wrappers: Sequence[str] = ('state_dict',)) -> dict:
    """``torch.load(path, weights_only=True)`` onto the CPU, failing with :class:`CheckpointError`
    for a missing, empty, corrupt or truncated file, an unsafe pickle (naming its global) or no
    state dict (bare or under ``wrappers``). Zip checkpoints are memory-mapped."""
    if not osp.isfile(path):
        raise CheckpointError(f'checkpoint {path!r} does not exist')
    if osp.getsize(path) == 0:
        raise CheckpointError(f'checkpoint {path!r} is empty (0 bytes)')
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True,
                                mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as exc:
        refused = REFUSED_GLOBAL.search(str(exc))
        if refused:
            raise CheckpointError(f'checkpoint {path!r} was refused as unsafe: its pickle asks for '
                                  f'{refused.group(1) or refused.group(2)}, which is not among the '
                                  'types a checkpoint may hold (tensors, containers and '
                                  'mmengine\'s log buffers)') from None
        raise CheckpointError(f'checkpoint {path!r} is not a PyTorch checkpoint, or it is corrupt '
                              'or truncated (its pickle cannot be read)') from None
    except Exception as exc:  # torch.load raises a different type for each kind of damage
        raise CheckpointError(f'checkpoint {path!r} is not a PyTorch checkpoint, or it is corrupt '
                              f'or truncated (torch.load raised {type(exc).__name__})') from None
    state_dict_of(checkpoint, path, wrappers)
    return checkpoint


def state_dict_of(checkpoint: object, path: str,
                  wrappers: Sequence[str] = ('state_dict',)) -> Dict[str, Tensor]:
    """The state dict inside ``checkpoint``: the first of ``wrappers`` present, else the checkpoint
    itself; :class:`CheckpointError` unless it is a non-empty dict of tensors."""
    if isinstance(checkpoint, dict):
        state_dict = next((checkpoint[key] for key in wrappers if key in checkpoint), checkpoint)
        if (
            isinstance(state_dict, dict)
            and state_dict
            and all(isinstance(v, Tensor) for v in state_dict.values())
        ):
            return state_dict
    raise CheckpointError(f'checkpoint {path!r} holds no state dict: expected a dict of tensors, '
                          f'bare or under one of {list(wrappers)}, found {_describe(checkpoint)}')


# `.<name>.<pid>.partial`: what write_atomically writes before renaming it into place
PARTIAL = re.compile(r'^\..+\.(?P<pid>\d+)\.partial$')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_partials(folder: str) -> None:
    """Remove the partial files that interrupted writes (of processes no longer running) left in
    ``folder``; nothing else writes files of that name."""
    for name in os.listdir(folder):
        match = PARTIAL.match(name)
        if match and int(match['pid']) != os.getpid() and not _alive(int(match['pid'])):
            os.remove(osp.join(folder, name))


def write_atomically(path: str, write: Callable[[IO[bytes]], None]) -> None:
    """``write(file)`` into ``path``, never seen incomplete: a partial file in the same folder
    written, flushed and renamed over ``path``; earlier leftovers removed first."""
    folder = osp.dirname(path) or '.'
    os.makedirs(folder, exist_ok=True)
    remove_partials(folder)
    partial = osp.join(folder, f'.{osp.basename(path)}.{os.getpid()}.partial')
    try:
        with open(partial, 'wb') as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    finally:
        if osp.exists(partial):
            os.remove(partial)
    descriptor = os.open(folder, os.O_RDONLY)  # the rename itself reaches the disk
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_atomically(obj: object, path: str) -> None:
    """``torch.save(obj, path)`` through :func:`write_atomically`."""
    write_atomically(path, lambda file: torch.save(obj, file))


def writes_local_files(filename: str, file_client_args: Optional[dict],
                       backend_args: Optional[dict]) -> bool:
    """Whether mmengine's ``save_checkpoint`` would write ``filename`` through its ``LocalBackend``
    (no ``pavi://``, no file client)."""
    from mmengine.fileio import LocalBackend, get_file_backend
    if filename.startswith('pavi://') or file_client_args is not None:
        return False
    return type(get_file_backend(filename, backend_args=backend_args)) is LocalBackend


def atomic_save_checkpoint(save: Callable) -> Callable:
    """mmengine's ``save_checkpoint`` writing local files through :func:`save_atomically`; other
    backends (Petrel, S3, HTTP) keep ``save``."""
    @functools.wraps(save)
    def save_checkpoint(checkpoint: dict, filename: str, file_client_args: Optional[dict] = None,
                        backend_args: Optional[dict] = None) -> None:
        if not writes_local_files(str(filename), file_client_args, backend_args):
            return save(checkpoint, filename, file_client_args, backend_args)
        save_atomically(checkpoint, str(filename))
    save_checkpoint.atomic = True
    return save_checkpoint


def save_then_prune(hook, runner, step: int, meta: dict) -> None:
    """``CheckpointHook._save_checkpoint_with_step`` in a safe order: write the new checkpoint, name
    it in ``last_checkpoint``, then remove the one beyond ``max_keep_ckpts`` (mmengine removes
    first)."""
    from mmengine.dist import is_main_process
    expired = []
    if hook.max_keep_ckpts > 0 and not (hook.keep_ckpt_ids and hook.keep_ckpt_ids[-1] == step):
        if len(hook.keep_ckpt_ids) == hook.max_keep_ckpts:
            expired.append(hook.file_backend.join_path(hook.out_dir, hook.filename_tmpl.format(
                hook.keep_ckpt_ids.popleft())))
        hook.keep_ckpt_ids.append(step)
        runner.message_hub.update_info('keep_ckpt_ids', list(hook.keep_ckpt_ids))
    filename = hook.filename_tmpl.format(step)
    hook.last_ckpt = hook.file_backend.join_path(hook.out_dir, filename)
    runner.message_hub.update_info('last_ckpt', hook.last_ckpt)
    runner.save_checkpoint(hook.out_dir, filename, hook.file_client_args,
                           save_optimizer=hook.save_optimizer,
                           save_param_scheduler=hook.save_param_scheduler, meta=meta,
                           by_epoch=hook.by_epoch, backend_args=hook.backend_args, **hook.args)
    if not is_main_process():
        return
    write_atomically(osp.join(runner.work_dir, 'last_checkpoint'),
                     lambda file: file.write(hook.last_ckpt.encode()))
    for path in expired:
        if hook.file_backend.isfile(path):
            hook.file_backend.remove(path)
        elif hook.file_backend.isdir(path):  # DeepSpeed writes folders
            hook.file_backend.rmtree(path)


def replace_best_then_remove(save_best: Callable) -> Callable:
    """``CheckpointHook._save_best_checkpoint`` removing the previous best only after the new one is
    written (the hook's removals held back while it runs, then done, except of a path named best
    again)."""
    @functools.wraps(save_best)
    def wrapped(hook, runner, metrics: dict) -> None:
        # stock's path: nothing to save, or
        if not hook.save_best or not hasattr(hook, 'file_backend'):
            # no training (file backend set before it)
            return save_best(hook, runner, metrics)
        backend, held_back = hook.file_backend, []
        for method in ('remove', 'rmtree'):
            setattr(backend, method, lambda path, method=method: held_back.append((method, path)))
        try:
            save_best(hook, runner, metrics)
        finally:
            # the instance's stand-ins: the class's methods again
            del backend.remove, backend.rmtree
        kept = {getattr(hook, 'best_ckpt_path', None),
                *getattr(hook, 'best_ckpt_path_dict', {}).values()}
        for method, path in held_back:
            if path not in kept:
                getattr(backend, method)(path)
    wrapped.replaces_then_removes = True
    return wrapped


def _describe(value: object) -> str:
    if isinstance(value, dict):
        return f'a dict with keys {list(value)[:5]}'
    return f'a {type(value).__name__}'


KeyRule = Tuple[str, Optional[str]]


def rename_keys(state_dict: Dict[str, Tensor], rules: Sequence[KeyRule],
                complete: Optional[str] = None) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """Each key renamed by the first matching ``(pattern, replacement)`` rule (``re.sub``); ``None``
    drops it, as does no match unless ``complete`` names the source, then a one-line ``KeyError``.
    Returns the renamed dict and the dropped keys."""
    converted, dropped = OrderedDict(), []
    for key, value in state_dict.items():
        rule = next(
            ((pattern, replacement) for pattern, replacement in rules if re.match(pattern, key)),
            None,
        )
        if rule is None and complete:
            raise KeyError(f'{complete} key {key!r} matches no conversion rule')
        if rule is None or rule[1] is None:
            dropped.append(key)
        else:
            converted[re.sub(rule[0], rule[1], key)] = value
    return converted, dropped


def converter_arguments(description: str, source: str,
                        config_help: str = 'check the result against the backbone of this config',
                        config_required: bool = False) -> argparse.ArgumentParser:
    """The command line every converter shares: ``SRC DST [--config CONFIG]``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('src', help=source)
    parser.add_argument('dst', help='where to save the converted checkpoint')
    parser.add_argument('--config', required=config_required, help=config_help)
    return parser


def require_source_keys(state_dict: Dict[str, Tensor], src: str, pattern: 're.Pattern',
                        what: str) -> None:
    """Exit in one line unless some key of ``src`` matches ``pattern`` (``what`` says which keys and
    which checkpoint were expected)."""
    if not any(pattern.match(key) for key in state_dict):
        raise SystemExit(f'error: {src} holds no {what}')


def read_converter_input(src: str, dst: str,
                         wrappers: Sequence[str] = ('state_dict',)) -> Dict[str, Tensor]:
    """The start every converter shares: refuse a ``dst`` that would overwrite ``src``, read
    ``src`` and return its state dict; every failure exits with one line."""
    if osp.realpath(src) == osp.realpath(dst):
        raise SystemExit(f'error: the output {dst!r} is the input checkpoint; pick another path '
                         '(a converter never overwrites its input)')
    try:
        return state_dict_of(read_checkpoint(src, wrappers), src, wrappers)
    except CheckpointError as exc:
        raise SystemExit(f'error: {exc}') from None


def backbone_state_dict(config: str) -> Dict[str, Tensor]:
    """The state dict of the backbone of ``config``, freshly built."""
    from mmvisattn.registry import build_from_config
    return build_from_config(config, 'backbone').state_dict()


def check_backbone_weights(config: str, weights: Dict[str, Tensor],
                           expected: Optional[Dict[str, Tensor]] = None) -> List[str]:
    """The parameter names ``weights`` leaves newly initialised in ``config``'s backbone
    (``expected``: its state dict if built); a one-line ``ValueError`` for a key without a place or
    a wrong shape. A ``backbone.`` prefix is accepted."""
    expected = backbone_state_dict(config) if expected is None else expected
    prefix = 'backbone.' if any(k.startswith('backbone.') for k in weights) else ''
    weights = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        raise ValueError(f'{len(unexpected)} checkpoint keys have no place in the backbone of '
                         f'{config}, e.g. {unexpected[:3]}')
    for key, value in weights.items():
        if value.shape != expected[key].shape:
            raise ValueError(f'checkpoint {key} has shape {tuple(value.shape)}, the backbone of '
                             f'{config} expects {tuple(expected[key].shape)} (a checkpoint of '
                             'another width?)')
    return sorted(set(expected) - set(weights))


def save_converted(converted: Dict[str, Tensor], dst: str, config: Optional[str] = None) -> None:
    """The end every converter shares: check against ``config`` (when given) and report what stays
    newly initialised, exit in one line when the weights do not fit, then save ``dst``."""
    if config:
        try:
            new = check_backbone_weights(config, converted)
        except ValueError as exc:
            raise SystemExit(f'error: {exc}') from None
        print(f'newly initialised in the backbone ({len(new)}): '
              + (', '.join(new) if new else 'none'))
    save_atomically({'state_dict': converted}, dst)
    print(f'saved {dst}')
