"""Loading and atomically writing the small files of the contracts (YAML/JSON)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from pmoss.contracts.errors import ContractError, PmossError

M = TypeVar("M", bound=pydantic.BaseModel)

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/pmoss/contracts/io.py -> the repository


def seconds_from_env(name: str, default: float, *, zero: str | None = None) -> float:
    """A duration in seconds from $name (unset or empty: `default`). `zero` says what 0 means where
    0 is allowed (and is named in every error); without it the value must be > 0."""
    raw = os.environ.get(name, "")
    hint = f" (0 {zero})" if zero else ""
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise PmossError(f"{name}={raw!r}: not a number of seconds{hint}") from None
    if not (value > 0 or (zero and value == 0)):  # NaN fails both
        raise PmossError(f"{name}={raw!r}: must be {'>=' if zero else '>'} 0 seconds{hint}")
    return value


def shipped(relative: str) -> Path:
    """A config the repository ships (training/*.yaml, datasets/pools/*.yaml), found from any directory."""
    return REPO_ROOT / relative


class NoProjectError(ContractError):
    """No P-MOSS project (a directory with dvc.yaml) where a command looked for its outputs."""


def project_root(start: Path | None = None) -> Path:
    """The project a command works in, for the defaults that name its outputs (the MLflow store
    `mlflow/mlflow.db`, `eval/`): the nearest directory holding dvc.yaml from `start` (the working
    directory) upwards, else the repository this pmoss runs from (an editable install or a
    checkout on PYTHONPATH). Never a bare working directory: a command run elsewhere would make an
    empty store there and report nothing registered. Raises NoProjectError saying where it looked."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").is_file():
            return d
    if (REPO_ROOT / "dvc.yaml").is_file():
        return REPO_ROOT
    raise NoProjectError(f"no P-MOSS project in {here} or above (no dvc.yaml), and this pmoss is not run from a checkout; "
                         "run it from the repository")  # fmt: skip


class DuplicateKey(ValueError):
    pass


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"key '{key}' appears twice; keep one")
        out[key] = value
    return out


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML keeps the last of a repeated key; like the runtime's JSON reader, we refuse it.
    libyaml's parser where PyYAML has it: the Python one took 1.2 s of a training stage's start (machine descriptors)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKey(f"key '{key}' appears twice (line {key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML or JSON file into a dict; errors name the file. A repeated key is an error in
    both (the C runtime's schedule reader, jansson with JSON_REJECT_DUPLICATES, does the same)."""
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"{path}: no such file")
    try:
        text = path.read_text()
        data = json.loads(text, object_pairs_hook=_json_object) if path.suffix == ".json" else yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506
    except DuplicateKey as e:
        raise ContractError(f"{path}: {e}") from None
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ContractError(f"{path}: malformed {path.suffix.lstrip('.') or 'YAML'}: {_one_line(e)}") from e
    if not isinstance(data, dict):
        raise ContractError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_model(cls: type[M], path: Path) -> M:
    """Load a pydantic contract from a file; the error names the file and the first bad field."""
    return validate_model(cls, read_mapping(path), source=str(path))


def load_model_with_flags(cls: type[M], path: Path, flags: dict[str, Any]) -> M:
    """`load_model` with command-line overrides (field -> value; None = not given). A bad override is
    blamed on its flag (`--episodes-per-cell -1: ...`), anything else on the file."""
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return validate_model(cls, {**read_mapping(path), **given}, source=str(path))
    except ContractError as e:
        field = next((k for k in given if f": field '{k}': " in str(e)), None)
        if field is None:
            raise
        raise ContractError(f"--{field.replace('_', '-')} {given[field]}: {str(e).split(f': field {field!r}: ', 1)[-1]}") from None


def require_known(values: Iterable[str], known: Iterable[str], what: str) -> None:
    """For field validators: a ValueError naming the first of `values` not in `known`."""
    known = list(known)
    unknown = [v for v in values if v not in known]
    if unknown:
        raise ValueError(f"unknown {what} '{unknown[0]}' (known: {', '.join(known)})")


def one_of(known: Iterable[str], what: str) -> pydantic.AfterValidator:
    """A field's validator (`Annotated[list[str], one_of(...)]`): every name, or the one name, is known."""

    def check(v: Any) -> Any:
        require_known([v] if isinstance(v, str) else v, known, what)
        return v

    return pydantic.AfterValidator(check)


def validate_model(cls: type[M], data: Any, source: str) -> M:
    try:
        return cls.model_validate(data)
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if not err["loc"]:  # model-level checks start their message with the field's name
            raise ContractError(f"{source}: field '{msg.split(':', 1)[0]}':{msg.split(':', 1)[-1]}") from e
        field = ".".join(str(p) for p in err["loc"])
        raise ContractError(f"{source}: field '{field}': {msg}") from e


# The file system's refusals of a write, as the one-line error says them.
WRITE_FAILURES = {
    errno.ENOSPC: "disk full (ENOSPC)",
    errno.EDQUOT: "disk quota exceeded (EDQUOT)",
    errno.EROFS: "read-only file system (EROFS)",
    errno.EACCES: "permission denied (EACCES)",
    errno.EPERM: "operation not permitted (EPERM)",
}


class OutputError(PmossError):
    """An output cannot be written (disk full, read-only, no permission); nothing partial is left."""


# torch's zip writer (torch.save to a file) reports a failed write() as a RuntimeError without the
# errno: "[enforce fail at inline_container.cc:...] . unexpected pos 576 vs 534" on a full tmpfs,
# "PytorchStreamWriter failed writing file data/0: file write failed" elsewhere; some builds
# include the C library's text ("No space left on device").
TORCH_WRITE_FAILED = ("PytorchStreamWriter failed", "file write failed", "unexpected pos", "inline_container.cc")
ERRNO_TEXTS = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded", errno.EROFS: "Read-only file system",
               errno.EACCES: "Permission denied"}  # fmt: skip
FULL_BELOW_BYTES = 1 << 20  # a failed write with less than this free: the disk filled (tmpfs, ext4's reserve for root aside)


def _errno_of(e: BaseException, path: Path | str | None) -> int | None:
    """The errno of a refused write: an OSError's own; for torch's RuntimeError, the one its text
    names, else ENOSPC when its writer failed and the file system of `path` is (nearly) full."""
    if isinstance(e, OSError):
        return e.errno
    if not isinstance(e, RuntimeError):
        return None
    text = str(e)
    named = next((code for code, words in ERRNO_TEXTS.items() if words in text), None)
    if named is not None or path is None or not any(m in text for m in TORCH_WRITE_FAILED):
        return named
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        return errno.ENOSPC if shutil.disk_usage(where).free < FULL_BELOW_BYTES else None
    except OSError:
        return None


def write_failure(e: BaseException, path: Path | str | None, clean: bool = True) -> OutputError | None:
    """The one-line error for a refused write of `path` (None: the file the OSError names), or
    None when `e` is not such a refusal (a bug, a missing input: those keep their traceback).
    pyarrow raises OSError(errno, text) without a file name, hence `path`; torch.save raises a
    RuntimeError (`_errno_of`). `clean`: the writer removed what it had started, and the message
    says so."""
    code = _errno_of(e, path)
    reason = WRITE_FAILURES.get(code or 0)
    if reason is None:
        return None
    where = path if path is not None else (getattr(e, "filename", None) or "an output")
    fix = "free some space there" if code in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
    return OutputError(f"{where}: cannot write, {reason}; {fix} or write elsewhere" + (" (nothing partial was left)" if clean else ""))


@contextmanager
def writing(path: Path | str, clean: bool = True) -> Iterator[None]:
    """Turn the file system refusing a write under `path` (an OSError, or torch.save's RuntimeError)
    into an OutputError naming it; `clean` as in `write_failure`."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        error = write_failure(e, path, clean)
        if error is None:
            raise
        raise error from e


def atomic_write_text(path: Path, text: str) -> None:
    """Write via temp file + rename so a reader never sees a half-written file."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def model_text(model: pydantic.BaseModel, suffix: str) -> str:
    """A contract as the text of a file with this suffix: JSON for .json, else YAML."""
    data = model.model_dump(mode="json")
    return json.dumps(data, indent=1) + "\n" if suffix == ".json" else yaml.safe_dump(data, sort_keys=False)


def dump_model(model: pydantic.BaseModel, path: Path) -> None:
    atomic_write_text(Path(path), model_text(model, Path(path).suffix))


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())
