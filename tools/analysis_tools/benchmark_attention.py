"""Time and memory of registered attentions over growing token grids.

The tool's logic: :mod:`mmvisattn.analysis.benchmark_attention`."""
from mmvisattn.analysis.benchmark_attention import main

if __name__ == '__main__':
    main()
