"""User-facing errors. Each message names the file / field / slice that is wrong and how to fix it."""


class PmossError(Exception):
    """Base class: the CLI prints these as one line and exits non-zero."""


class ContractError(PmossError):
    """A file or object breaks a data contract of DESIGN §4."""
