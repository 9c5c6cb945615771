"""What a run reference names: a run directory, a run id or a unique part of one, 'last', or a
run's name (the newest run of that name). Each command takes runs of some kinds (`serve
ready` a server, `flow --resume` a flow, `results parse` a run with results): `last` and a name
then mean the newest run of those kinds, and a run of another kind is refused naming the
kinds that would fit.

The store's index answers `last` and names without reading every record where it can
(store/sync.py `newest_run_dir`); without a store, the run directories are read, newest first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from proctor.errors import UsageError
from proctor.record.rundir import RunDir, is_run_id
from proctor.record.schema import read_view

#: The kinds each command takes (None: any). A Slurm group is a server where `slurm serve`
#: started it (its record holds the server's facts).
SERVER_KINDS: tuple[str, ...] = ("server", "slurm")
FLOW_KINDS: tuple[str, ...] = ("flow",)
SLURM_KINDS: tuple[str, ...] = ("slurm",)
#: Runs whose directory or log holds results to parse, check or compare.
RESULT_KINDS: tuple[str, ...] = (
    "bench",
    "eval",
    "offline",
    "workload",
    "sweep",
    "command",
    "slurm",
    "remote",
    "imported",  # another tool's result, read in by `results import`
)


#: What a command's kinds are called in its errors (else the kinds themselves).
_NAMES: dict[tuple[str, ...], str] = {SERVER_KINDS: "server", RESULT_KINDS: "result"}


def kinds_text(kinds: Sequence[str]) -> str:
    """('bench', 'eval', 'sweep') -> 'bench, eval or sweep'."""
    kinds = list(kinds)
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} or {kinds[-1]}"


def _name(kinds: Sequence[str]) -> str:
    return _NAMES.get(tuple(kinds)) or kinds_text(kinds)


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _list_hint(kinds: Sequence[str] | None) -> str:
    if not kinds:
        return "see `proctor runs list`"
    return (
        f"it takes a run of kind {kinds_text(kinds)}:"
        f" `proctor runs list --kind {','.join(kinds)}` lists them"
    )


def _newest_of_second(runs_dir: Path, ids: list[str]) -> list[str]:
    """Sorted run ids, newest first: ids name their second, then a random part, so among
    those of one second the record's creation time (milliseconds) decides."""
    out: list[str] = []
    index = len(ids)
    while index > 0:
        second = ids[index - 1][:15]
        start = index
        while start > 0 and ids[start - 1][:15] == second:
            start -= 1
        tied = ids[start:index]
        if len(tied) > 1:
            tied.sort(key=lambda i: (read_view(runs_dir / i).created_at or "", i))
        out.extend(reversed(tied))
        index = start
    return out


def _walk_newest(runs_dir: Path, ids: list[str]) -> Iterator[str]:
    yield from _newest_of_second(runs_dir, ids)


def _kind_ok(run: Path, kinds: Sequence[str] | None) -> bool:
    return not kinds or read_view(run).kind in kinds


def _checked(run: RunDir, kinds: Sequence[str] | None) -> RunDir:
    if kinds:
        kind = read_view(run.path).kind
        # A record that cannot say its kind (unreadable, a newer proctor's) is let through:
        # the command's own reading of it says what is wrong.
        if kind and kind not in kinds and "kind" in read_view(run.path).model_fields_set:
            raise UsageError(
                f"run {run.run_id} is not {_a(_name(kinds))} run: it is {_a(kind)} run",
                hint=_list_hint(kinds),
            )
    return run


def _from_store(
    store_path: Path | None, runs_dir: Path, kinds: Sequence[str] | None, name: str | None
) -> RunDir | None:
    if store_path is None:
        return None
    from proctor.store.sync import newest_run_dir

    found = newest_run_dir(store_path, runs_dir, kinds, name=name)
    return RunDir(found) if found is not None else None


def resolve_run(
    runs_dir: Path,
    ref: str,
    kinds: Sequence[str] | None = None,
    *,
    store_path: Path | None = None,
) -> RunDir:
    """The run `ref` names, of one of `kinds` (None: any kind): a path to its directory, its
    id or a unique part of it, 'last' (the newest), or its name (the newest of that name).
    `store_path`: the store that indexes `runs_dir`, read first for 'last' and names."""
    candidate = Path(ref)
    if candidate.is_dir() and (candidate / "record.json").exists():
        return _checked(RunDir(candidate.resolve()), kinds)
    if not runs_dir.is_dir():
        raise UsageError(f"no runs in {runs_dir}", hint="pass --runs-dir or set PROCTOR_RUNS_DIR")
    if ref == "last":
        if found := _from_store(store_path, runs_dir, kinds, None):
            return found
        ids = sorted(p.name for p in runs_dir.iterdir() if p.is_dir() and is_run_id(p.name))
        for run_id in _walk_newest(runs_dir, ids):
            if _kind_ok(runs_dir / run_id, kinds):
                return RunDir(runs_dir / run_id)
        of = f"{_name(kinds)} " if kinds else ""
        raise UsageError(f"no {of}run in {runs_dir}", hint=_list_hint(kinds))
    ids = sorted(p.name for p in runs_dir.iterdir() if p.is_dir() and is_run_id(p.name))
    matches = [i for i in ids if i == ref] or [i for i in ids if i.startswith(ref) or ref in i]
    if len(matches) == 1:
        return _checked(RunDir(runs_dir / matches[0]), kinds)
    if matches:
        raise UsageError(
            f"run id {ref!r} is ambiguous ({len(matches)} runs)", hint="give more of it"
        )
    # A name: the newest run of that name (and of the kinds asked for).
    if found := _from_store(store_path, runs_dir, kinds, ref):
        return found
    named = [i for i in _walk_newest(runs_dir, ids) if read_view(runs_dir / i).name == ref]
    for run_id in named:
        if _kind_ok(runs_dir / run_id, kinds):
            return RunDir(runs_dir / run_id)
    if named:
        return _checked(RunDir(runs_dir / named[0]), kinds)  # says which kind it is
    raise UsageError(
        f"no run {ref!r} in {runs_dir} (no run id, part of one, or run name)",
        hint="see `proctor runs list`",
    )


__all__ = [
    "FLOW_KINDS",
    "RESULT_KINDS",
    "SERVER_KINDS",
    "SLURM_KINDS",
    "kinds_text",
    "resolve_run",
]
