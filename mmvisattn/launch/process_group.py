"""Joining the process group of a distributed run, on CPU (gloo) and CUDA (NCCL) alike, before the
Runner exists. Beyond stock mmengine 0.10.7:

- **CPU-only machines**: a gloo group, and DDP without ``device_ids`` (mmengine's rejects CPU
  modules).
- **A port per Slurm job** (:func:`slurm_master_port`): jobs sharing a node do not all take 29500.
- **A roll call** (:func:`roll_call`): a rank that never comes ends the others after
  ``env_cfg.dist_cfg.timeout`` in one line naming it.
- **An orderly end** (:func:`leave_process_group`): rank 0, the store's host, leaves last."""
import os
import socket
import subprocess
import time
from datetime import timedelta
from typing import List, Mapping, Optional

import torch
import torch.distributed as dist
from mmengine.config import Config

LAUNCHERS = ('none', 'pytorch', 'slurm')
# torch's default for the rendezvous and the collectives of gloo and NCCL groups (seconds)
DEFAULT_TIMEOUT = 1800
# Slurm jobs' rendezvous ports: below Linux's ephemeral range (32768-60999), from which the kernel
# takes the ports of outgoing connections; a few consecutive ones per job, one for each restart
JOB_PORTS = range(10000, 32768)
RESTARTS_PER_JOB = 16
# what ``env_cfg.dist_cfg`` may set (mmengine's init_dist passes more on to init_process_group; this
# start keeps the store and the ranks its own)
DIST_CFG_KEYS = ('backend', 'timeout')
ROLL_CALL_KEY = 'mmvisattn/joined/{}'
LEFT_KEY = 'mmvisattn/left'
ROLL_CALL_POLL = 0.1  # seconds


def slurm_master_port(env: Mapping[str, str]) -> str:
    """The rendezvous port of a Slurm job: ``MASTER_PORT`` if set, else derived from
    ``SLURM_JOB_ID`` and ``SLURM_RESTART_COUNT`` (a requeued job's old port may be held), the same
    in every task."""
    if env.get('MASTER_PORT'):
        return env['MASTER_PORT']
    job, restart = env.get('SLURM_JOB_ID', '0'), env.get('SLURM_RESTART_COUNT', '0') or '0'
    if not (job.isdigit() and restart.isdigit()):
        raise SystemExit(f'error: SLURM_JOB_ID={job!r} and SLURM_RESTART_COUNT={restart!r}: '
                         'expected numbers (or set MASTER_PORT)')
    slot = int(job) * RESTARTS_PER_JOB + int(restart) % RESTARTS_PER_JOB
    return str(JOB_PORTS.start + slot % len(JOB_PORTS))


def slurm_layout(env: Mapping[str, str]) -> dict:
    """The torch launcher's variables of a Slurm task, as mmengine's slurm launcher exports them."""
    master = env.get('MASTER_ADDR') or subprocess.check_output(
        ['scontrol', 'show', 'hostnames', env['SLURM_NODELIST']], text=True).split()[0]
    return dict(RANK=env['SLURM_PROCID'], WORLD_SIZE=env['SLURM_NTASKS'],
                LOCAL_RANK=env['SLURM_LOCALID'],
                MASTER_ADDR=master, MASTER_PORT=slurm_master_port(env))


def join_process_group(cfg: Config) -> None:
    """Join the group ``cfg.launcher`` describes (nothing for ``none`` or if started): NCCL (or
    ``env_cfg.dist_cfg.backend``) on CUDA, gloo otherwise, ``dist_cfg.timeout`` seconds for
    rendezvous and collectives; other ``dist_cfg`` keys are refused in one line."""
    if cfg.launcher not in LAUNCHERS:
        raise SystemExit(f'error: launcher {cfg.launcher!r} is not supported; expected one of '
                         f'{LAUNCHERS}')
    if cfg.launcher == 'none' or dist.is_initialized():
        return
    if cfg.launcher == 'slurm':
        os.environ.update(slurm_layout(os.environ))
    dist_cfg = cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
    unknown = sorted(set(dist_cfg) - set(DIST_CFG_KEYS))
    if unknown:
        raise SystemExit(f'error: env_cfg.dist_cfg sets {", ".join(unknown)}; expected only '
                         f'{", ".join(DIST_CFG_KEYS)}')
    timeout = timedelta(seconds=dist_cfg.get('timeout', DEFAULT_TIMEOUT))
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ['LOCAL_RANK']))
        backend = dist_cfg.get('backend', 'nccl')
    else:
        backend = dist_cfg['backend'] = 'gloo'
        cfg.model_wrapper_cfg = dict(type='MMDistributedDataParallel', device_ids=None)
    rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    store = rendezvous_store(rank, world_size, timeout)
    if store is None:
        dist.init_process_group(backend, timeout=timeout)
        return
    roll_call(store, rank, world_size, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    _JOINED.update(store=store, timeout=timeout)


# the store this process started its group with, kept to close it in order (leave_process_group)
_JOINED: dict = {}


def leave_process_group() -> None:
    """End a finished run's group: a barrier, the group destroyed, then the store let go, rank 0
    last (or after the timeout). Nothing when no group was started."""
    if not dist.is_initialized():
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()
    dist.destroy_process_group()
    store, timeout = _JOINED.pop('store', None), _JOINED.pop('timeout', None)
    if store is None:  # torchrun's agent hosts the store
        return
    if rank != 0:
        store.add(LEFT_KEY, 1)
        return
    deadline = time.monotonic() + timeout.total_seconds()
    while store.add(LEFT_KEY, 0) < world_size - 1 and time.monotonic() < deadline:
        time.sleep(ROLL_CALL_POLL)


def rendezvous_store(rank: int, world_size: int, timeout: timedelta) -> Optional[dist.Store]:
    """The store at ``MASTER_ADDR:MASTER_PORT``, hosted by rank 0; None under torchrun."""
    if os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True':
        return None
    host, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])
    if rank != 0:
        await_rank_0(host, port, rank, world_size, timeout)
    try:
        return dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout,
                             wait_for_workers=False)
    except RuntimeError as error:  # DistNetworkError from torch 2.7 on, a plain RuntimeError before
        if 'EADDRINUSE' not in str(error):
            raise
        raise SystemExit(f'error: MASTER_PORT {port} on {host} is taken by another program '
                         '(EADDRINUSE); set '
                         'MASTER_PORT (PORT for dist_train.sh) to a free port') from None


def await_rank_0(host: str, port: int, rank: int, world_size: int, timeout: timedelta) -> None:
    """Wait until rank 0's store accepts connections; after ``timeout``, end in one line. (torch's
    client retries by itself, but logs every failed try from C++.)"""
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        try:
            socket.create_connection((host, port), timeout=ROLL_CALL_POLL).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f'error: rank {rank} of {world_size} could not reach rank 0 at '
                                 f'{host}:{port} within {timeout.total_seconds():g} s '
                                 '(env_cfg.dist_cfg.timeout): rank 0 never started') \
                    from None
            time.sleep(ROLL_CALL_POLL)


def roll_call(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> None:
    """Report ``rank`` in ``store`` and wait for all ``world_size``; after ``timeout``, end in one
    line naming the missing ranks (polled: torch's wait logs from C++)."""
    store.set(ROLL_CALL_KEY.format(rank), '1')
    deadline = time.monotonic() + timeout.total_seconds()
    while (missing := missing_ranks(store, world_size)) and time.monotonic() < deadline:
        time.sleep(ROLL_CALL_POLL)
    where = f'{os.environ["MASTER_ADDR"]}:{os.environ["MASTER_PORT"]}'
    if missing is None:
        raise SystemExit(f'error: rank 0 left the rendezvous at {where} before every rank joined')
    if missing:
        raise SystemExit(f'error: rank{"s" * (len(missing) > 1)} {", ".join(map(str, missing))} of '
                         f'{world_size} never joined the rendezvous at {where} within '
                         f'{timeout.total_seconds():g} s (env_cfg.dist_cfg.timeout)')


def missing_ranks(store: dist.Store, world_size: int) -> Optional[List[int]]:
    """The ranks not yet reported in ``store``; None when the store cannot be reached (rank 0, its
    host, has gone)."""
    try:
        return [other for other in range(world_size)
                if not store.check([ROLL_CALL_KEY.format(other)])]
    except dist.DistError:
        return None
