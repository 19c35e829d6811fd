"""Checkpoints are written atomically (mmvisattn.utils.checkpoint.write_atomically): the target is
whole or untouched, a failed write leaves the previous file, and the partial files of interrupted
writes are removed by the next write, but only those of processes no longer running."""
import os
import subprocess
import sys

import pytest
import torch

from mmvisattn.utils.checkpoint import save_atomically, write_atomically


def test_a_save_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    target = tmp_path / 'sub' / 'iter_2.pth'
    save_atomically({'state_dict': {'w': torch.ones(3)}}, str(target))
    save_atomically({'state_dict': {'w': torch.zeros(3)}}, str(target))
    assert torch.equal(torch.load(target)['state_dict']['w'], torch.zeros(3))
    assert [path.name for path in target.parent.iterdir()] == ['iter_2.pth']


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    target = tmp_path / 'last_checkpoint'
    target.write_text('iter_2.pth')

    def fail(file):
        file.write(b'iter_')
        raise OSError('disk full')
    with pytest.raises(OSError, match='disk full'):
        write_atomically(str(target), fail)
    assert target.read_text() == 'iter_2.pth' and [p.name for p in tmp_path.iterdir()] == [
        'last_checkpoint'
    ]


def test_partials_of_finished_processes_are_removed_and_others_kept(tmp_path):
    finished = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                              capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f'.iter_6.pth.{finished}.partial'
    running = tmp_path / f'.iter_6.pth.{os.getppid()}.partial'  # a live process's write in progress
    unrelated = tmp_path / 'notes.partial'
    for path in (stale, running, unrelated):
        path.write_bytes(b'half')
    save_atomically({'state_dict': {}}, str(tmp_path / 'iter_8.pth'))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ['iter_8.pth', running.name, unrelated.name]
    )
