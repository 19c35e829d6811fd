"""The Slurm launch scripts under a real one-node Slurm (:mod:`.slurm_cluster`), as users run them:
``slurm_train.sh`` and ``slurm_test.sh`` with two tasks, two jobs sharing the node, the batch script
of the docs preempted mid-run (it checkpoints, requeues itself and resumes to the weights of an
uninterrupted run), a rank that never joins, and requests Slurm cannot place.

Run by ``make test-lab``. Without Slurm, or without root, the module is skipped with one line saying
why; ``.ci/run`` installs Slurm and sets ``MMVISATTN_REQUIRE_SLURM=1``, under which the tests fail
instead."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mmvisattn  # noqa: F401  (lets torch.load read Runner checkpoints)

from ..conftest import REPO, run_tool, time_limit, tool_env
from .slurm_cluster import PARTITION, REQUIRED, OneNodeSlurm, why_not
from .test_training_faults import RWGKA_DEMO, logged_losses

WHY_NOT = why_not()
if WHY_NOT and os.environ.get(REQUIRED) != '1':
    pytest.skip(f'the Slurm tests need a one-node Slurm on this machine: {WHY_NOT}',
                allow_module_level=True)
# one cluster, on one worker; a cluster is a lab's machine: `make test-lab`
pytestmark = [pytest.mark.xdist_group('slurm'), pytest.mark.lab]

CONFIG = RWGKA_DEMO.relative_to(REPO)
ITERS = 6
OPTIONS = [f'train_cfg.max_iters={ITERS}', 'train_cfg.val_begin=1000',
           'train_dataloader.batch_size=2',
           'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
           'default_hooks.logger.interval=1', 'default_hooks.checkpoint.interval=1000',
           'model.backbone.drop_path_rate=0.2', 'randomness.seed=7']
TWO_TASKS = dict(GPUS='2', GPUS_PER_NODE='2', CPUS_PER_TASK='1')
JOB_LIMIT = 240  # seconds for one job of these tests


@pytest.fixture(scope='module')
def slurm(tmp_path_factory) -> OneNodeSlurm:
    if WHY_NOT:
        pytest.fail(f'{REQUIRED}=1 but the Slurm tests cannot run: {WHY_NOT}', pytrace=False)
    cluster = OneNodeSlurm(tmp_path_factory.mktemp('slurm')).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope='module')
def project(workspace, tmp_path_factory) -> Path:
    """A checkout as the docs' commands expect it: tools/, configs/ and the demo data side by
    side."""
    root = tmp_path_factory.mktemp('project')
    for name in ('tools', 'configs'):
        (root / name).symlink_to(REPO / name)
    (root / 'data').symlink_to(workspace / 'data')
    return root


def launch(slurm: OneNodeSlurm, project: Path, command: list, **env) -> subprocess.Popen:
    """Start ``command`` in ``project`` with the cluster's client settings, one thread per task."""
    full_env = dict(tool_env(), SLURM_CONF=slurm.env['SLURM_CONF'], OMP_NUM_THREADS='1', **env)
    return subprocess.Popen(list(map(str, command)), cwd=project, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, limit: float = JOB_LIMIT) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=time_limit(limit))
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def slurm_train(slurm, project, work_dir, *options, **env) -> subprocess.Popen:
    return launch(slurm, project,
                  [REPO / 'tools/slurm_train.sh', PARTITION, 'train', CONFIG, work_dir,
                                   '--cfg-options', *OPTIONS, *options], **env)


def succeeded(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f'{done.args} exited {done.returncode}\n{done.stderr[-4000:]}'
    return done


def logged_metrics(work_dir: Path) -> dict:
    """The metrics ``tools/test.py`` logged into ``work_dir`` (timings left out)."""
    (log,) = work_dir.glob('*/*.json')
    return {key: value for key, value in json.loads(log.read_text().splitlines()[-1]).items()
            if key not in ('time', 'data_time', 'step')}


def state_dict(checkpoint: Path) -> dict:
    return torch.load(checkpoint, map_location='cpu')['state_dict']


@pytest.fixture(scope='module')
def straight(slurm, project) -> Path:
    """A 2-task training through slurm_train.sh, uninterrupted."""
    work_dir = project / 'work_dirs' / 'straight'
    succeeded(finished(slurm_train(slurm, project, work_dir, **TWO_TASKS)))
    return work_dir


def test_slurm_train_trains_with_two_tasks_and_checkpoints(straight):
    log = next(straight.glob('*/*.log')).read_text()
    # mmengine's name for the world size
    assert 'Distributed launcher: slurm' in log and 'GPU number: 2' in log
    assert sorted(logged_losses(straight)) == list(range(1, ITERS + 1))
    assert len(torch.load(straight / f'iter_{ITERS}.pth', map_location='cpu')['random_states']) == 2


def test_slurm_test_with_two_tasks_gives_the_single_process_metrics(slurm, project, straight):
    checkpoint = straight / f'iter_{ITERS}.pth'
    two = project / 'work_dirs' / 'test-two-tasks'
    succeeded(finished(launch(slurm, project,
                              [REPO / 'tools/slurm_test.sh', PARTITION, 'test', CONFIG, checkpoint,
                                               '--work-dir', two], **TWO_TASKS)))
    one = project / 'work_dirs' / 'test-one-process'
    run_tool(['tools/test.py', CONFIG, checkpoint, '--work-dir', one], cwd=project)
    metrics = logged_metrics(one)
    assert 'mIoU' in metrics and logged_metrics(two) == metrics


def test_two_jobs_share_the_node(slurm, project):
    """Two single-task jobs at once (each its own rendezvous port): both run together and finish."""
    one_task = dict(GPUS='1', GPUS_PER_NODE='1', CPUS_PER_TASK='1')
    jobs = [slurm_train(slurm, project, project / 'work_dirs' / f'shared-{index}',
                        **one_task) for index in (0, 1)]
    together = 0
    while any(job.poll() is None for job in jobs):
        together = max(together,
                       slurm.command('squeue', '-h', '-t', 'RUNNING', check=False).count('\n'))
        time.sleep(0.2)
    for job in jobs:
        succeeded(finished(job))
    assert together == 2, 'the two jobs never ran at the same time'
    for index in (0, 1):
        assert (project / 'work_dirs' / f'shared-{index}' / f'iter_{ITERS}.pth').is_file()


def test_the_batch_script_preempted_requeues_itself_and_ends_as_an_uninterrupted_run(
    slurm, project, straight
):
    """tools/slurm_batch.sh (the docs' sbatch example) with two tasks: ``scancel --signal=USR1``
    mid-run (what ``--signal=USR1@120`` sends) has both tasks checkpoint the iteration they were in
    and the job requeue itself; the requeued job resumes by itself and ends with the uninterrupted
    run's weights."""
    work_dir = project / 'work_dirs' / 'preempted'
    submitted = succeeded(finished(launch(
        slurm, project,
        ['sbatch', '--parsable', f'--partition={PARTITION}', '--ntasks-per-node=2', '--gres=gpu:2',
                         '--cpus-per-task=1', 'tools/slurm_batch.sh', CONFIG, work_dir,
         '--cfg-options', *OPTIONS])))
    job = submitted.stdout.strip()
    deadline = time.monotonic() + time_limit(JOB_LIMIT)
    while not logged_losses(work_dir).get(2):
        assert time.monotonic() < deadline and slurm.command(
            'squeue', '-h', '-j', job, check=False
        ), 'the job ended before its second iteration'
        time.sleep(0.1)
    slurm.command('scancel', '--signal=USR1', job)
    # requeued, then run again to the end
    while slurm.command('squeue', '-h', '-j', job, check=False).strip():
        assert time.monotonic() < deadline + time_limit(JOB_LIMIT), f'job {job} did not finish'
        time.sleep(0.5)
    output = (project / f'slurm-mmvisattn-{job}.out').read_text()
    resumed = re.findall(rf'Auto resumed from the latest checkpoint {work_dir}/iter_(\d+)\.pth',
                         output)
    # the iteration the signal met
    assert len(resumed) == 1 and 2 <= int(resumed[0]) < ITERS, output[-3000:]
    assert (work_dir / f'iter_{ITERS}.pth').is_file()
    expected, got = logged_losses(straight), logged_losses(work_dir)
    assert got == expected
    reference, result = (state_dict(straight / f'iter_{ITERS}.pth'),
                         state_dict(work_dir / f'iter_{ITERS}.pth'),)
    assert reference.keys() == result.keys() and all(
        torch.equal(reference[key], result[key]) for key in reference
    )


def test_a_rank_that_never_joins_ends_the_job_in_one_line(slurm, project, tmp_path):
    """Task 1 hangs before it starts training; task 0 gives up after the rendezvous timeout, naming
    it, and srun ends the job (--kill-on-bad-exit)."""
    python = tmp_path / 'python'
    python.write_text('#!/bin/sh\n[ "$SLURM_PROCID" = 1 ] && exec sleep 600\nexec '
                      f'{sys.executable} "$@"\n')
    python.chmod(0o755)
    started = time.monotonic()
    done = finished(slurm_train(slurm, project, tmp_path / 'work', 'env_cfg.dist_cfg.timeout=5',
                                PYTHON=str(python), **TWO_TASKS))
    assert done.returncode != 0 and 'Traceback' not in done.stderr, done.stderr[-4000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith('error:')]
    assert len(ours) == 1 and ours[0].startswith('error: rank 1 of 2 never joined the rendezvous '
                                                 'at '), done.stderr
    assert ours[0].endswith(' within 5 s (env_cfg.dist_cfg.timeout)')
    assert time.monotonic() - started < time_limit(60)


@pytest.mark.parametrize('env,message', [
    (dict(GPUS='4', GPUS_PER_NODE='4', CPUS_PER_TASK='1'),
     "error: Slurm refuses GPUS=4 tasks, GPUS_PER_NODE=4, CPUS_PER_TASK=1 on partition "
     "'{partition}': Requested node configuration is not available"),
    (dict(TWO_TASKS, PARTITION='nope'),
     "error: Slurm refuses GPUS=2 tasks, GPUS_PER_NODE=2, CPUS_PER_TASK=1 on partition 'nope': "
     "Invalid partition name specified"),
], ids=['too many tasks', 'unknown partition'])
def test_a_request_slurm_cannot_place_is_one_line(slurm, project, env, message):
    partition = env.pop('PARTITION', PARTITION)
    done = finished(launch(slurm, project, [REPO / 'tools/slurm_train.sh', partition, 'job', CONFIG,
                                            'work'], **env))
    assert done.returncode == 1 and done.stderr.strip() == message.format(partition=partition)


def test_without_srun_the_scripts_say_so(tmp_path):
    (tmp_path / 'bin').mkdir()
    for program in ('bash', 'dirname'):  # what the scripts run besides srun
        (tmp_path / 'bin' / program).symlink_to(shutil.which(program))
    for script, tool in (('slurm_train.sh', 'train'), ('slurm_test.sh', 'test')):
        done = subprocess.run(['/bin/bash', str(REPO / 'tools' / script), PARTITION, 'job',
                               'CONFIG', 'WORK'],
                              capture_output=True, text=True, env=dict(PATH=str(tmp_path / 'bin')))
        assert done.returncode == 1 and done.stderr.strip() == (
            f"error: srun is not on PATH: tools/slurm_{tool}.sh runs where Slurm's commands are (a "
            f"login node); on one machine use tools/dist_{tool}.sh")
