"""Images per second of every family's demo beside its stock twin, each through ``benchmark.py``
(``make bench-demos``).

The tool's logic: :mod:`lab.bench.demo_fps`."""
from lab.bench.demo_fps import main

if __name__ == '__main__':
    main()
