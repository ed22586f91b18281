"""python -m portmat {bench,devices,tune}: the command line."""

from .cli import main

raise SystemExit(main())
