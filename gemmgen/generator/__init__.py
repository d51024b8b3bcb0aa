"""The generator layer: kernel specs and their rules, the tuning tables, emission from the templates."""
from .. import __version__  # noqa: F401  (one version, the package's)
