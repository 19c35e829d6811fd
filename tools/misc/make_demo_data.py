"""Write the synthetic "shapes" demo data the demo configs train on (``data/shapes`` by default):

    python tools/misc/make_demo_data.py --out data/shapes [--num-train N] [--num-val N] [--size S]

The layouts, the files and the guarantees (transactional, nothing of a user's deleted):
:mod:`mmvisattn.utils.demo_data`, the tool's logic.
"""
from mmvisattn.utils.demo_data import main

if __name__ == '__main__':
    main()
