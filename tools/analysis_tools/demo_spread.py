"""How far a demo's metric moves with the seed and the CPU's summation order (seeds x thread
counts), and whether a run falls inside the measured range (``--check``, the end of ``make demo``).

The tool's logic: :mod:`mmvisattn.analysis.demo_spread`."""
from mmvisattn.analysis.demo_spread import main

if __name__ == '__main__':
    main()
