"""``python -m fntrace ...`` is the ``fntrace`` command."""
import sys

from fntrace.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
