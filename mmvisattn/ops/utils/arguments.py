"""One-line errors for arguments that must be one of a few names (ops and modules)."""
from typing import Sequence


def check_choice(owner: str, value: str, choices: Sequence[str], name: str = 'impl') -> str:
    """``value``, or a one-line ``ValueError`` naming ``owner``, ``name`` and the choices."""
    if value not in choices:
        raise ValueError(f'{owner}: {name}={value!r}; expected one of {tuple(choices)}')
    return value
