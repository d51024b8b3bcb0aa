"""What every kernel spec shares: how it refuses a bad parameter tuple."""
from __future__ import annotations


class SpecError(ValueError):
    """A tuning tuple that breaks a rule. `rule` names the rule so callers (the sweep's results
    file, the CLI) can record why a variant was refused."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"{rule}: {message}")
        self.rule = rule


def require(condition: bool, rule: str, message: str) -> None:
    if not condition:
        raise SpecError(rule, message)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
