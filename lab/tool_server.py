"""Runs command-line tools in forked copies of a process that has imported the stock stack already,
so a tool run costs what the tool does, not the imports. The test suite runs its tools through it,
and the children of the package's measurements too.

Each run is a process of its own: forked, in its own session, with the run's directory, environment,
``sys.argv`` and streams, the script as ``__main__``; ``mmvisattn`` and the tools are imported
afresh (never by the server), so a missing import fails as for a user. Runs setting a start-up
variable the server read otherwise (:data:`IMPORT_TIME_VARIABLES`) need a fresh interpreter. A run
finds the socket in ``$MMVISATTN_TOOL_SERVER`` and :func:`run_python` in
``$MMVISATTN_PYTHON_RUNNER``.

Protocol, one Unix-socket connection per run: the client sends a JSON line (``argv``, ``cwd``,
``env``, ``stdout``, ``stderr``); the server answers ``{"pid": ...}`` at the start and
``{"returncode": ...}`` at the end (negative: killed by that signal). ``python lab/tool_server.py
SOCKET`` serves until its parent is gone."""
import atexit
import importlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional

# what register_all_modules of mmdet and mmseg import, and the Runner: most of a tool's start; not
# their models, which import torchvision only after mmvisattn's patch (each run imports them)
PRELOAD = ('torch', 'mmengine.runner', 'mmcv.ops', 'mmdet.datasets', 'mmdet.engine',
           'mmdet.evaluation', 'mmdet.visualization', 'mmseg.datasets', 'mmseg.engine',
           'mmseg.evaluation', 'mmseg.visualization')


# where a run forked from a server finds it (:func:`run_python`)
SERVER_VARIABLE = 'MMVISATTN_TOOL_SERVER'
# the runner of the package's measurement children (named: the server never imports mmvisattn)
RUNNER_VARIABLE, RUNNER = 'MMVISATTN_PYTHON_RUNNER', 'lab.tool_server:run_python'


def main(path: str) -> None:
    os.environ[SERVER_VARIABLE] = path  # every run's environment gets it (run below)
    for name in PRELOAD:
        importlib.import_module(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    print('ready', flush=True)
    parent = os.getppid()
    server.settimeout(5)
    while os.getppid() == parent:
        try:
            connection, _ = server.accept()
        except socket.timeout:
            continue
        if os.fork() == 0:  # the run's supervisor: starts the run, reports its end
            server.close()
            supervise(connection)
        connection.close()
        reap()


def reap() -> None:
    """Collect the supervisors that have ended (no zombies accumulate over a session)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def supervise(connection: socket.socket) -> None:
    connection.settimeout(None)
    stream = connection.makefile('rw')
    request = json.loads(stream.readline())
    pid = os.fork()
    if pid == 0:
        stream.close()
        connection.close()
        run(request)  # never returns: the run ends this process as a script's end would
    stream.write(json.dumps(dict(pid=pid)) + '\n')
    stream.flush()
    _, status = os.waitpid(pid, 0)
    stream.write(json.dumps(dict(returncode=os.waitstatus_to_exitcode(status))) + '\n')
    stream.flush()
    os._exit(0)


def run(request: dict) -> None:
    """Become the run: a new session, the request's directory, environment, streams and arguments,
    then the script (or ``-m`` module) as ``__main__``."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request['cwd'])
    socket_path = os.environ[SERVER_VARIABLE]
    os.environ.clear()
    os.environ.update(request['env'], **{SERVER_VARIABLE: socket_path, RUNNER_VARIABLE: RUNNER})
    for fd, target in ((0, os.devnull), (1, request['stdout']), (2, request['stderr'])):
        if fd == 2 and target == request['stdout']:
            os.dup2(1, 2)  # one file, one offset: the streams interleave as a terminal shows them
            continue
        opened = os.open(target, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    line = 1 if os.environ.get('PYTHONUNBUFFERED') else -1  # stderr is line-buffered either way
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, 'w', buffering=line, closefd=False)
    sys.stderr = open(2, 'w', buffering=1, closefd=False, errors='backslashreplace')
    fresh_random_states()
    import runpy
    try:
        if request['argv'][0] == '-m':  # python -m MODULE: the working directory first on the path
            sys.argv = [request['argv'][1], *request['argv'][2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request['argv'][1], run_name='__main__', alter_sys=True)
        else:
            script = os.path.abspath(request['argv'][0])
            sys.argv = [script, *request['argv'][1:]]
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name='__main__')
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


def fresh_random_states() -> None:
    """Reseed Python's and numpy's generators from the OS as a new process does; torch's threads
    follow the run's ``OMP_NUM_THREADS``."""
    import numpy
    import torch
    random.seed()
    numpy.random.seed()
    # a new process starts torch's generator at its fixed default
    torch.manual_seed(torch.initial_seed())
    threads = os.environ.get('OMP_NUM_THREADS', '')
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


# Read when an interpreter starts or a stock package loads: a run whose environment sets them
# otherwise than the server's starts a fresh interpreter instead.
IMPORT_TIME_VARIABLES = ('PYTHONPATH', 'PYTHONHOME', 'PYTHONHASHSEED', 'PYTHONWARNINGS',
                         'PYTHONNOUSERSITE', 'LD_PRELOAD', 'LD_LIBRARY_PATH',
                         'CUDA_VISIBLE_DEVICES', 'TRITON_INTERPRET', 'TORCH_LOGS')


class ToolServer:
    """The client: starts the server on first use in the environment ``base_env()`` gives (the one
    the tools usually run in), then sends it the runs whose start-up variables match it."""

    def __init__(self, base_env: Callable[[], Dict[str, str]]):
        self.base_env = base_env
        self.lock = threading.Lock()
        self.process: Optional[subprocess.Popen] = None
        self.folder: Optional[Path] = None
        self.env: Dict[str, str] = {}
        self.attached = False

    @classmethod
    def of_this_run(cls) -> Optional['ToolServer']:
        """A client of the server this process was forked from, or None where it was not."""
        path = os.environ.get(SERVER_VARIABLE)
        if not path or not os.path.exists(path):
            return None
        client = cls(lambda: dict(os.environ))
        client.folder, client.env, client.attached = Path(path).parent, dict(os.environ), True
        return client

    def serves(self, env: Dict[str, str]) -> bool:
        """Whether a run in ``env`` can be forked from the server (starting it on first use)."""
        self.started()
        return all(env.get(name) == self.env.get(name) for name in IMPORT_TIME_VARIABLES)

    def started(self) -> None:
        """Start the server unless it runs (a run may come before any ``serves`` question)."""
        with self.lock:
            if self.process is None and not self.attached:
                self.start(self.base_env())

    def start(self, env: Dict[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix='tools-'))
        log = open(self.folder / 'server.log', 'w')
        self.process = subprocess.Popen([sys.executable, __file__, str(self.folder / 'socket')],
                                        env=env, text=True, stdout=subprocess.PIPE, stderr=log,
                                        stdin=subprocess.DEVNULL)
        log.close()
        if not any(line.strip() == 'ready' for line in self.process.stdout):
            raise RuntimeError('the tool server did not start: '
                               f'{(self.folder / "server.log").read_text()[-3000:]}')
        self.env = dict(env)
        atexit.register(self.close)

    def run(self, command: List[str], timeout: float, cwd: Path, env: Dict[str, str],
            output: Optional[Path] = None) -> subprocess.CompletedProcess:
        """``command`` forked from the server, reported as ``subprocess.run`` would (``output``:
        both streams to that file, then None); past ``timeout`` the group is killed and
        TimeoutExpired raised."""
        self.started()
        streams = Path(tempfile.mkdtemp(dir=self.folder))
        stdout, stderr = (output, output) if output else (streams / 'stdout', streams / 'stderr')
        request = dict(argv=[str(arg) for arg in command[1:]], cwd=str(cwd), env=env,
                       stdout=str(stdout), stderr=str(stderr))
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(str(self.folder / 'socket'))
                connection.settimeout(timeout)
                stream = connection.makefile('rw')
                stream.write(json.dumps(request) + '\n')
                stream.flush()
                pid = json.loads(stream.readline())['pid']
                try:
                    returncode = json.loads(stream.readline())['returncode']
                except TimeoutError:
                    os.killpg(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(command, timeout) from None
            if output:
                return subprocess.CompletedProcess(command, returncode)
            return subprocess.CompletedProcess(command, returncode, *(
                (streams / name).read_text(errors='replace') for name in ('stdout', 'stderr')))
        finally:
            shutil.rmtree(streams, ignore_errors=True)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            shutil.rmtree(self.folder, ignore_errors=True)
            self.process = None


def run_python(args: List[str], timeout: Optional[float] = None,
               env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
               output: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python args`` as :func:`lab.bench.processes.run_python` runs it: forked from this process's
    tool server where ``env`` keeps its start-up variables, else a fresh interpreter."""
    env = dict(os.environ if env is None else env)
    env.pop(RUNNER_VARIABLE, None)
    command = [sys.executable, *map(str, args)]
    server = ToolServer.of_this_run()
    if server is not None and server.serves(env):
        return server.run(command, timeout or CHILD_TIMEOUT, Path(cwd or os.getcwd()), env, output)
    from lab.bench.processes import run_fresh  # a client's: the package is imported there
    return run_fresh(args, timeout, env, cwd, output)


CHILD_TIMEOUT = 24 * 3600.0  # a forked run needs a time-out; a fresh one has none unless asked


if __name__ == '__main__':
    main(sys.argv[1])
