"""A rendezvous port per job: Slurm jobs derive theirs from the job id and restart count (on the CPU
path and on mmengine's CUDA path), and the torchrun scripts on one node take a free one, so that two
jobs on one machine no longer both take 29500; a port another program holds ends in one line."""
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config

from mmvisattn.launch import process_group
from mmvisattn.launch.process_group import JOB_PORTS, join_process_group, slurm_master_port

from ..conftest import REPO, run_command, time_limit, tool_env
from .conftest import SEG_DEMO, free_port


def slurm_env(job: str, restart: str = '0', **extra) -> dict:
    return dict(SLURM_JOB_ID=job, SLURM_RESTART_COUNT=restart, **extra)


def test_jobs_and_their_restarts_get_ports_of_their_own():
    ports = {
        slurm_master_port(slurm_env(str(job), str(restart)))
        for job in range(1000, 1100)
        for restart in range(3)
    }
    assert len(ports) == 300 and all(int(port) in JOB_PORTS for port in ports)
    # every task agrees
    assert slurm_master_port(slurm_env('1234')) == slurm_master_port(slurm_env('1234'))
    assert slurm_master_port(dict(slurm_env('1234'),
                                  SLURM_RESTART_COUNT='')) == slurm_master_port(slurm_env('1234'))


def test_a_port_the_user_set_is_kept():
    assert slurm_master_port(slurm_env('1234', MASTER_PORT='23456')) == '23456'


def test_a_job_id_that_is_not_a_number_is_one_line():
    with pytest.raises(SystemExit,
                       match=r"^error: SLURM_JOB_ID='12x' and SLURM_RESTART_COUNT='0': expected "
                       r"numbers"):
        slurm_master_port(slurm_env('12x'))


def test_with_cuda_a_slurm_task_joins_nccl_on_its_gpu_and_the_jobs_port(monkeypatch):
    """With CUDA the group is NCCL on the task's local GPU, at the job's port, as mmengine's own
    slurm start would have it (which then sees the group started and does nothing)."""
    for name, value in slurm_env('777', '1', SLURM_PROCID='3', SLURM_NTASKS='4', SLURM_LOCALID='1',
                                 SLURM_NODELIST='node1', MASTER_ADDR='127.0.0.1').items():
        monkeypatch.setenv(name, value)
    for name in ('MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    seen = {}
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'set_device', lambda device: seen.update(device=device))
    monkeypatch.setattr(process_group, 'rendezvous_store', lambda rank, world_size,
                        timeout: 'store')
    monkeypatch.setattr(process_group, 'roll_call', lambda *args: seen.update(roll_call=args[:3]))
    monkeypatch.setattr(dist, 'init_process_group', lambda backend, **kwargs: seen.update(
        backend=backend, port=os.environ['MASTER_PORT'], local_rank=os.environ['LOCAL_RANK'],
        **kwargs))
    cfg = Config(dict(launcher='slurm', env_cfg=dict(dist_cfg=dict(backend='nccl', timeout=60))))
    join_process_group(cfg)
    assert seen == dict(device=1, roll_call=('store', 3, 4), backend='nccl', store='store', rank=3,
                        world_size=4, timeout=timedelta(seconds=60),
                        port=slurm_master_port(slurm_env('777', '1')), local_rank='1')
    assert 'model_wrapper_cfg' not in cfg  # mmengine's wrapper, on device LOCAL_RANK


def roll_call_of(ranks, world_size: int, port: int, monkeypatch) -> dict:
    """Ranks (threads of this process) through the rendezvous at ``port`` with a 3 s timeout: each
    rank's one-line exit, or 'joined'."""
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(port))
    outcomes, stores = {}, []

    def rank_of(rank: int) -> None:
        try:
            stores.append(process_group.rendezvous_store(rank, world_size, timedelta(seconds=3)))
            process_group.roll_call(stores[-1], rank, world_size, timedelta(seconds=3))
            outcomes[rank] = 'joined'
        except SystemExit as exit:
            outcomes[rank] = str(exit)

    threads = [threading.Thread(target=rank_of, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(time_limit(30))
    return outcomes


def test_the_roll_call_names_the_ranks_that_never_came(monkeypatch):
    """Rank 2 of 3 never starts: ranks 0 and 1 end after the timeout, each in one line naming it."""
    port = free_port()
    line = (f'error: rank 2 of 3 never joined the rendezvous at 127.0.0.1:{port} within 3 s '
            '(env_cfg.dist_cfg.timeout)')
    assert roll_call_of([0, 1], 3, port, monkeypatch) == {0: line, 1: line}


def test_without_rank_0_the_others_say_so(monkeypatch):
    port = free_port()
    assert roll_call_of([1], 2, port, monkeypatch) == {1: (
        f'error: rank 1 of 2 could not reach rank 0 at 127.0.0.1:{port} within 3 s '
        '(env_cfg.dist_cfg.timeout): rank 0 never started')}


def test_when_every_rank_comes_they_all_join(monkeypatch):
    assert roll_call_of([0, 1, 2], 3, free_port(),
                        monkeypatch) == {0: 'joined', 1: 'joined', 2: 'joined'}


@pytest.mark.parametrize('env,expected', [
    (dict(), ['--standalone']),
    (dict(PORT='23456'),
     ['--nnodes=1', '--node_rank=0', '--master_addr=127.0.0.1', '--master_port=23456']),
    (dict(NNODES='2', NODE_RANK='1', MASTER_ADDR='10.0.0.1'),
     ['--nnodes=2', '--node_rank=1', '--master_addr=10.0.0.1', '--master_port=29500']),
])
@pytest.mark.parametrize('script', ['dist_train.sh', 'dist_test.sh'])
def test_torchrun_scripts_take_a_free_port_on_one_node(tmp_path, script, env, expected):
    """Without PORT on one node torchrun's standalone rendezvous picks a free port; a PORT, or
    several nodes, give the stock arguments."""
    python = tmp_path / 'python'
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    python.chmod(0o755)
    base = {name: value for name, value in os.environ.items()
            if name not in ('PORT', 'NNODES', 'NODE_RANK', 'MASTER_ADDR')}
    args = ['CONFIG', '2'] if script == 'dist_train.sh' else ['CONFIG', 'CKPT', '2']
    done = subprocess.run(['bash', str(REPO / 'tools' / script), *args], capture_output=True,
                          text=True, env=dict(base, PYTHON=str(python), **env), check=True)
    argv = done.stdout.split('\n')
    assert argv[:2] == ['-m',
                        'torch.distributed.run'] and argv[2:2 + len(expected)] == expected, argv
    assert argv[2 + len(expected)] == '--nproc_per_node=2'


def test_a_port_another_program_holds_is_one_line(workspace, tmp_path):
    """A rendezvous port already in use (torch: a DistNetworkError traceback) ends in one line
    naming it."""
    with socket.socket() as held:
        held.bind(('127.0.0.1', 0))
        held.listen()
        port = held.getsockname()[1]
        env = dict(tool_env(), RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1',
                   MASTER_PORT=str(port))
        done = run_command([sys.executable, str(REPO / 'tools/train.py'), str(SEG_DEMO),
                            '--work-dir', str(tmp_path / 'w'), '--launcher', 'pytorch'],
                           cwd=workspace, env=env)
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f'error: MASTER_PORT {port} on 127.0.0.1 is taken by another program (EADDRINUSE); set '
        'MASTER_PORT (PORT for dist_train.sh) to a free port')


def test_a_dist_cfg_key_the_start_does_not_read_is_one_line(monkeypatch):
    for name, value in dict(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0').items():
        monkeypatch.setenv(name, value)
    cfg = Config(dict(launcher='pytorch',
                      env_cfg=dict(dist_cfg=dict(backend='gloo', init_method='tcp://x:1'))))
    with pytest.raises(SystemExit,
                       match=r'^error: env_cfg.dist_cfg sets init_method; expected only backend, '
                       r'timeout$'):
        join_process_group(cfg)


LEAVING_RANK = '''
import os, sys, time
import torch.distributed as dist
from mmengine.config import Config
from mmvisattn.launch.process_group import join_process_group, leave_process_group
join_process_group(Config(dict(launcher='pytorch', env_cfg=dict(dist_cfg=dict(timeout=30)))))
# rank 1 lingers after the group's end: rank 0 must not close the store under it
if dist.get_rank() == 1:
    destroy = dist.destroy_process_group
    dist.destroy_process_group = lambda: (destroy(), time.sleep(1.5))
leave_process_group()
print(f'{time.time():.3f} {dist.is_initialized()}')
'''


def test_a_finished_run_leaves_the_group_rank_0_last():
    """Both ranks destroy the group; rank 0, the store's host, lets go of the store only after the
    other rank has (an exit that left both to the interpreter aborted rank 0 now and then)."""
    port = str(free_port())
    ranks = [subprocess.Popen([sys.executable, '-c', LEAVING_RANK], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(tool_env(), RANK=str(rank), LOCAL_RANK=str(rank),
                                       WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=port))
             for rank in (0, 1)]
    outputs = [rank.communicate(timeout=time_limit(120)) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], [err[-2000:] for _, err in outputs]
    (left_0, initialized_0), (left_1, initialized_1) = (out.split() for out, _ in outputs)
    assert initialized_0 == initialized_1 == 'False' and float(left_0) >= float(left_1) > 0
