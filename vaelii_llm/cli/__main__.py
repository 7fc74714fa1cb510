"""``python -m vaelii_llm.cli``: the ``vaelii-llm`` command."""

import sys

from vaelii_llm.cli import main

sys.exit(main())
