"""Time and memory of registered attentions over growing token grids.

The tool's logic: :mod:`mmvisattn.benchmarks.attention`."""
from mmvisattn.benchmarks.attention import main

if __name__ == '__main__':
    main()
