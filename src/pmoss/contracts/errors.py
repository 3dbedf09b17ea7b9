"""User-facing errors. Each message names the file / field / slice that is wrong and how to fix it."""


class PmossError(Exception):
    """Base class: the CLI prints these as one line and exits non-zero."""


class ContractError(PmossError):
    """A file or object breaks a data contract of docs/design.md §4."""


def brief(e: BaseException, limit: int = 120) -> str:
    """A library exception in a few words for a one-line error: its first sentence, without the
    advice some libraries append (torch's weights-only essay, urllib3's chain of causes)."""
    lines = str(e).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else type(e).__name__
    return text.split(". ")[0][:limit]
