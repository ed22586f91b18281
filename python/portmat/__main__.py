"""python -m portmat {bench,devices}: the command line."""

from .cli import main

raise SystemExit(main())
