"""``python -m rocke_aot.cli``: the same command as the ``rocke-aot`` script."""

import sys

from rocke_aot.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
