"""The run contract's old home: every public name now lives in bench/contract/ and is re-exported here
so that imports of bench.schema keep working. New code imports bench.contract.

    python -m bench.schema bench/schemas      # the same as python -m bench.contract bench/schemas
"""

import sys

from bench.contract import *  # noqa: F401,F403 - the re-export is this module's whole purpose
from bench.contract.generate import main

if __name__ == "__main__":
    sys.exit(main())
