"""`python -m bench.contract [DIR]`: the JSON Schemas, printed or written into DIR."""

import sys

from .generate import main

sys.exit(main())
