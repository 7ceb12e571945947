import os

from lab.local.procs import exited_children, wait_until
from tests.patience import within


def test_exited_children_yields_each_exited_child_once_with_its_status():
    pid = os.fork()
    if pid == 0:  # the child: gone at once, with a status of its own
        os._exit(3)
    collected: dict[int, int] = {}
    assert wait_until(lambda: collected.update(exited_children()) or pid in collected, within(10))
    assert os.waitstatus_to_exitcode(collected[pid]) == 3
    assert pid not in dict(exited_children())  # collected: no zombie is left to yield again
