"""The attention arena: attentions compared inside one model of a config, on equal footing.

The tool's logic: :mod:`mmvisattn.analysis.compare_attentions`."""
from mmvisattn.analysis.compare_attentions import main

if __name__ == '__main__':
    main()
