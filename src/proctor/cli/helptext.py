"""Help texts that many commands share, in one place (cheap to import: text only)."""

from __future__ import annotations

#: How a run is named on the command line (proctor.supervise.launch.resolve_run).
REF_FORMS = "a run id, a unique part of one, a run directory, 'last' (the newest), or a name"

RUNS_DIR_HELP = (
    "PATH of the runs directory (default: $PROCTOR_RUNS_DIR, else [run] runs_dir in"
    " proctor.toml, else logs/ at the project root)."
)
JSON_HELP = "Print the result as JSON on stdout (messages stay on stderr)."
GPU_SAMPLE_HELP = "SECONDS between GPU samples into gpu.csv (default 3; 0: none)."
HOST_HELP = "HOST (address) the server listens on (default 127.0.0.1)."
SERVED_MODEL_NAME_HELP = "NAME the server answers to in requests (default: the model path)."
EXTRA_ENGINE_HELP = "Arguments after -- go to the engine's command line, last (they win)."


def ref_help(what: str = "The run") -> str:
    """`REF`'s help: what it names and the forms it takes."""
    return f"{what}: {REF_FORMS}."


__all__ = [
    "EXTRA_ENGINE_HELP",
    "GPU_SAMPLE_HELP",
    "HOST_HELP",
    "JSON_HELP",
    "REF_FORMS",
    "RUNS_DIR_HELP",
    "SERVED_MODEL_NAME_HELP",
    "ref_help",
]
