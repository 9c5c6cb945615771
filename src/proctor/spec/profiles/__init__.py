"""Engine and model profiles: built-in TOML files loaded exactly like a user's proctor.toml.

from proctor.spec.profiles import load_profiles, build_server_command
profiles = load_profiles(parsed_proctor_toml)        # built-ins + user tables
engine = profiles.engine("vllm")
model = profiles.resolve_model(None, "/data/DeepSeek-R1-0528", engine)
argv, env = build_server_command(engine, model, "/data/DeepSeek-R1-0528", tp=8, port=8000)
"""

from proctor.spec.profiles.atom_import import import_models_accuracy, models_to_toml
from proctor.spec.profiles.command import (
    LauncherChoice,
    build_server_command,
    choose_launcher,
    uses_chat_template,
)
from proctor.spec.profiles.loader import ProfileSet, builtin_table, load_profiles, merge_tables
from proctor.spec.profiles.models import (
    AddonProfile,
    AddonUse,
    EngineProfile,
    FaultSet,
    Launcher,
    ModelProfile,
    OfflineSpec,
)

__all__ = [
    "AddonProfile",
    "AddonUse",
    "EngineProfile",
    "FaultSet",
    "Launcher",
    "LauncherChoice",
    "ModelProfile",
    "OfflineSpec",
    "ProfileSet",
    "build_server_command",
    "builtin_table",
    "choose_launcher",
    "import_models_accuracy",
    "load_profiles",
    "merge_tables",
    "models_to_toml",
    "uses_chat_template",
]
