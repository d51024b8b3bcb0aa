"""`python -m gemmgen`: the same as the `gemmgen` command."""
from .cli import main

main()
