"""A one-node Slurm cluster on this machine for the Slurm tests: munged, slurmctld and slurmd
started from a slurm.conf written into a temporary folder (nothing under /etc is read or changed),
and stopped afterwards.

The node is this machine as ``slurmd -C`` sees it (its CPUs and memory), with two GPUs declared as
generic resources, since ``tools/slurm_train.sh`` asks for ``--gres=gpu:GPUS_PER_NODE`` as stock
mmdet's does; their device files are empty files (slurmd logs that they are not devices, and
schedules them all the same). The tools run on the CPU, over gloo.

It needs Debian's ``slurm-wlm`` and ``munge`` and root (slurmd starts the tasks as their users).
:func:`why_not` says what is missing; ``.ci/run`` installs the packages, and sets
:data:`REQUIRED`, under which a machine that cannot start the cluster fails instead of skipping.
"""
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional

from .conftest import free_port

REQUIRED = 'MMVISATTN_REQUIRE_SLURM'
DAEMONS = ('munged', 'slurmctld', 'slurmd')
PROGRAMS = DAEMONS + ('mungekey', 'srun', 'sbatch', 'scontrol', 'squeue', 'scancel', 'sinfo')
# where Debian installs the daemons (root's PATH has it, a user's often not)
SEARCH_PATH = os.pathsep.join([os.environ.get('PATH', ''), '/usr/sbin', '/sbin'])
PARTITION = 'debug'
GPUS = 2
START_TIMEOUT = 60  # seconds for the node to register as idle
# seconds a step's credential lives, which is also how long a requeued job waits before it starts
# again (Slurm's default, 120, would make the requeue test wait two minutes)
CREDENTIAL_LIFETIME = 10


def which(program: str) -> Optional[str]:
    return shutil.which(program, path=SEARCH_PATH)


def why_not() -> Optional[str]:
    """Why this machine cannot start the cluster, or None when it can."""
    missing = [program for program in PROGRAMS if which(program) is None]
    if missing:
        return (f'{", ".join(missing)} not installed (apt-get install slurm-wlm munge, as root; '
                '.ci/run does)')
    if os.geteuid() != 0:
        return 'slurmd must run as root to start tasks'
    return None


class OneNodeSlurm:
    """The cluster, in ``folder``: ``env`` is what a client (srun, sbatch, scontrol) needs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / 'slurm.conf'
        self.node = socket.gethostname().split('.')[0]
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), PATH=SEARCH_PATH)
        self.daemons: List[subprocess.Popen] = []

    def start(self) -> 'OneNodeSlurm':
        for sub in ('state', 'spool', 'log'):
            (self.folder / sub).mkdir()
        self._start_munge()
        self._write_conf()
        self._start(which('slurmctld'), '-D', '-f', self.conf)
        self._start(which('slurmd'), '-D', '-f', self.conf, '-N', self.node)
        deadline = time.monotonic() + START_TIMEOUT
        while self.command('sinfo', '-h', '-o', '%T', check=False).strip() != 'idle':
            if time.monotonic() > deadline or any(
                daemon.poll() is not None for daemon in self.daemons
            ):
                self.stop()
                raise RuntimeError(f'the Slurm node did not come up within {START_TIMEOUT} s; logs '
                                   f'in {self.folder / "log"}')
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        """Cancel what still runs, then stop the daemons (slurmd last but one: it reaps the
        steps)."""
        self.command('scancel', '--full', '--partition', PARTITION, check=False)
        deadline = time.monotonic() + 30
        while self.command('squeue', '-h', check=False).strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    def command(self, *args: str, check: bool = True) -> str:
        """A Slurm client command's output."""
        done = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f'{" ".join(args)} exited {done.returncode}: {done.stderr.strip()}')
        return done.stdout

    def _start(self, *command) -> None:
        log = open(self.folder / 'log' / f'{Path(command[0]).name}.out', 'w')
        self.daemons.append(subprocess.Popen(list(map(str, command)), stdout=log,
                                             stderr=subprocess.STDOUT, env=self.env))
        log.close()

    def _start_munge(self) -> None:
        key, self.munge_socket = self.folder / 'munge.key', self.folder / 'munge.socket'
        subprocess.run([which('mungekey'), '--create', f'--keyfile={key}'], check=True,
                       capture_output=True)
        self._start(which('munged'), '--foreground', '--force', f'--key-file={key}',
                    f'--socket={self.munge_socket}', f'--pid-file={self.folder / "munged.pid"}',
                    f'--seed-file={self.folder / "munged.seed"}',
                    f'--log-file={self.folder / "log" / "munged.log"}')
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f'munged did not start; see {self.folder / "log"}')
            time.sleep(0.05)

    def _write_conf(self) -> None:
        # NodeName=... CPUs=...
        hardware = subprocess.check_output([which('slurmd'), '-C'], text=True).splitlines()[0]
        gpus = [self.folder / f'gpu{index}' for index in range(GPUS)]
        for gpu in gpus:
            gpu.touch()
        (self.folder / 'gres.conf').write_text(f'NodeName={self.node} Name=gpu '
                                               f'File={self.folder}/gpu[0-{GPUS - 1}]\n')
        settings = dict(
            ClusterName='mmvisattn-tests', SlurmctldHost=f'{self.node}(127.0.0.1)',
            SlurmUser='root', SlurmdUser='root', SlurmctldPort=free_port(), SlurmdPort=free_port(),
            AuthType='auth/munge',
            AuthInfo=f'socket={self.munge_socket},cred_expire={CREDENTIAL_LIFETIME}',
            CredType='cred/munge', StateSaveLocation=self.folder / 'state',
            SlurmdSpoolDir=self.folder / 'spool', SlurmctldPidFile=self.folder / 'slurmctld.pid',
            SlurmdPidFile=self.folder / 'slurmd.pid',
            SlurmctldLogFile=self.folder / 'log' / 'slurmctld.log',
            SlurmdLogFile=self.folder / 'log' / 'slurmd.log',
            # no cgroups: the tasks are plain processes, tracked by their parent
            ProctrackType='proctrack/linuxproc', TaskPlugin='task/none',
            JobAcctGatherType='jobacct_gather/none',
            AccountingStorageType='accounting_storage/none', JobCompType='jobcomp/none',
            MpiDefault='none',
            SwitchType='switch/none', SelectType='select/cons_tres', SelectTypeParameters='CR_CPU',
            ReturnToService=2, JobRequeue=1, GresTypes='gpu', KillWait=5, MailProg='/bin/true')
        lines = [f'{name}={value}' for name, value in settings.items()]
        lines += [f'{hardware} NodeAddr=127.0.0.1 Gres=gpu:{GPUS} State=UNKNOWN',
                  f'PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE '
                  'State=UP']
        self.conf.write_text('\n'.join(lines) + '\n')
