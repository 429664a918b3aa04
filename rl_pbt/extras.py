"""How a user adds an optional extra: one spelling for every message that names one."""


def install_hint(extra: str) -> str:
    """The command that adds `extra`'s packages to an installed rl_pbt from any folder, for a
    plain or an editable install alike (pip keeps the installed rl_pbt and adds what the extra
    lists). `pip install -e ".[X]"` works only inside the checkout: elsewhere it fails, or in
    the user's own project reinstalls that project and adds nothing."""
    return f'pip install "rl_pbt[{extra}]"'
