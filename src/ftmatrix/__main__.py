"""``python -m ftmatrix``."""

from ftmatrix.cli import main

raise SystemExit(main())
