"""`python -m app` is `krl`."""

from app.cli import main

main()
