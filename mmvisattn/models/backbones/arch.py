"""How every backbone of the project reads its ``arch`` argument, as mmdet's Swin and mmpretrain's
models do: a name from the class's ``arch_zoo``, or a dict holding the same keys."""
from typing import Dict, Sequence, Union


def resolve_arch(owner: str, arch: Union[str, Dict], arch_zoo: Dict[str, Dict], keys: Sequence[str]) -> Dict:
    """The settings ``arch`` names in ``arch_zoo``, or ``arch`` itself when it is a dict holding every
    key of ``keys``; otherwise a one-line ``ValueError`` naming ``owner``, the value and what is
    accepted. Backbones check the values themselves (one entry per stage...)."""
    if isinstance(arch, str) and arch in arch_zoo:
        return dict(arch_zoo[arch])
    if not isinstance(arch, dict):
        raise ValueError(f'{owner}: arch={arch!r}; expected one of {sorted(arch_zoo)} or a dict with keys '
                         f'{tuple(keys)}')
    missing = [key for key in keys if key not in arch]
    if missing:
        raise ValueError(f'{owner}: arch dict misses {missing}; expected keys {tuple(keys)}')
    return dict(arch)
