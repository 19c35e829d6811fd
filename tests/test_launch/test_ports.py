"""A rendezvous port per job: Slurm jobs derive theirs from the job id and restart count (on the CPU
path and on mmengine's CUDA path), and the torchrun scripts on one node take a free one, so that two
jobs on one machine no longer both take 29500; a port another program holds ends in one line."""
import os
import socket
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

from mmvisattn.launch.runner import JOB_PORTS, init_cpu_distributed, slurm_master_port

from ..conftest import REPO, run_command, tool_env
from .conftest import SEG_DEMO


def slurm_env(job: str, restart: str = '0', **extra) -> dict:
    return dict(SLURM_JOB_ID=job, SLURM_RESTART_COUNT=restart, **extra)


def test_jobs_and_their_restarts_get_ports_of_their_own():
    ports = {slurm_master_port(slurm_env(str(job), str(restart))) for job in range(1000, 1100) for restart in range(3)}
    assert len(ports) == 300 and all(int(port) in JOB_PORTS for port in ports)
    assert slurm_master_port(slurm_env('1234')) == slurm_master_port(slurm_env('1234'))  # every task agrees
    assert slurm_master_port(dict(slurm_env('1234'), SLURM_RESTART_COUNT='')) == slurm_master_port(slurm_env('1234'))


def test_a_port_the_user_set_is_kept():
    assert slurm_master_port(slurm_env('1234', MASTER_PORT='23456')) == '23456'


def test_a_job_id_that_is_not_a_number_is_one_line():
    with pytest.raises(SystemExit, match=r"^error: SLURM_JOB_ID='12x' and SLURM_RESTART_COUNT='0': expected numbers"):
        slurm_master_port(slurm_env('12x'))


def test_mmengines_cuda_slurm_start_takes_the_jobs_port(monkeypatch):
    """With CUDA the Runner's own ``init_dist('slurm')`` starts the group; the port it uses is the job's."""
    from mmengine.dist import utils as dist_utils
    for name, value in slurm_env('777', '1', SLURM_PROCID='0', SLURM_NTASKS='2', SLURM_LOCALID='0',
                                 SLURM_NODELIST='node1').items():
        monkeypatch.setenv(name, value)
    for name in ('MASTER_PORT', 'MASTER_ADDR', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'set_device', lambda device: None)
    monkeypatch.setattr(dist_utils.subprocess, 'getoutput', lambda command: 'node1')
    seen = {}
    monkeypatch.setattr(dist_utils.torch_dist, 'init_process_group',
                        lambda **kwargs: seen.update(port=os.environ['MASTER_PORT'], **kwargs))
    init_cpu_distributed(Config(dict(launcher='slurm')))
    dist_utils._init_dist_slurm('nccl')
    assert seen == dict(port=slurm_master_port(slurm_env('777', '1')), backend='nccl')


@pytest.mark.parametrize('env,expected', [
    (dict(), ['--standalone']),
    (dict(PORT='23456'), ['--nnodes=1', '--node_rank=0', '--master_addr=127.0.0.1', '--master_port=23456']),
    (dict(NNODES='2', NODE_RANK='1', MASTER_ADDR='10.0.0.1'),
     ['--nnodes=2', '--node_rank=1', '--master_addr=10.0.0.1', '--master_port=29500']),
])
@pytest.mark.parametrize('script', ['dist_train.sh', 'dist_test.sh'])
def test_torchrun_scripts_take_a_free_port_on_one_node(tmp_path, script, env, expected):
    """Without PORT on one node torchrun's standalone rendezvous picks a free port; a PORT, or several
    nodes, give the stock arguments."""
    python = tmp_path / 'python'
    python.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    python.chmod(0o755)
    base = {name: value for name, value in os.environ.items()
            if name not in ('PORT', 'NNODES', 'NODE_RANK', 'MASTER_ADDR')}
    args = ['CONFIG', '2'] if script == 'dist_train.sh' else ['CONFIG', 'CKPT', '2']
    done = subprocess.run(['bash', str(REPO / 'tools' / script), *args], capture_output=True, text=True,
                          env=dict(base, PYTHON=str(python), **env), check=True)
    argv = done.stdout.split('\n')
    assert argv[:2] == ['-m', 'torch.distributed.run'] and argv[2:2 + len(expected)] == expected, argv
    assert argv[2 + len(expected)] == '--nproc_per_node=2'


def test_a_port_another_program_holds_is_one_line(workspace, tmp_path):
    """A rendezvous port already in use (torch: a DistNetworkError traceback) ends in one line naming it."""
    with socket.socket() as held:
        held.bind(('127.0.0.1', 0))
        held.listen()
        port = held.getsockname()[1]
        env = dict(tool_env(), RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
        done = run_command([sys.executable, str(REPO / 'tools/train.py'), str(SEG_DEMO), '--work-dir', str(tmp_path / 'w'),
                            '--launcher', 'pytorch'], cwd=workspace, env=env)
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f'error: MASTER_PORT {port} on 127.0.0.1 is taken by another program (EADDRINUSE); set MASTER_PORT '
        '(PORT for dist_train.sh) to a free port')
