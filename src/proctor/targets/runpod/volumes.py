"""Which network volume a run uses: an existing one named for the project, unless told otherwise.

Creating a volume costs money and using a volume not named for the project may touch someone
else's data: both need the user's explicit word (exit 77 naming the flag).
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.errors import NotAuthorised, UsageError
from proctor.targets.runpod.client import RunpodClient
from proctor.targets.runpod.models import NetworkVolume, NetworkVolumeCreateInput


@dataclass(frozen=True)
class VolumeChoice:
    volume: NetworkVolume
    created: bool


def named_for_project(name: str | None, project: str) -> bool:
    """`proj`, `proj-eu`, `proj_2` are named for project `proj`; `myproj` is not."""
    if not name:
        return False
    lowered, proj = name.lower(), project.lower()
    return lowered == proj or lowered.startswith((proj + "-", proj + "_"))


def resolve_volume(
    client: RunpodClient,
    *,
    project: str,
    name: str | None = None,
    data_center: str | None = None,
    size_gb: int = 100,
    allow_create_volume: bool = False,
    allow_other_volume: bool = False,
) -> VolumeChoice:
    """The network volume to mount; creates one only with `allow_create_volume`.

    `name` is the configured volume name (None: the project's name). A data center, when given,
    restricts the choice (a pod can only mount a volume of its own data center).
    """
    wanted = name or project
    if not named_for_project(wanted, project) and not allow_other_volume:
        raise NotAuthorised(
            f"volume {wanted!r} is not named for project {project!r}",
            flag="--allow-other-volume",
        )
    volumes = client.list_network_volumes()
    in_dc = [v for v in volumes if data_center is None or v.dataCenterId == data_center]
    exact = [v for v in in_dc if v.name == wanted]
    if not exact and name is None:
        exact = [v for v in in_dc if named_for_project(v.name, project)]
    if len(exact) == 1:
        return VolumeChoice(exact[0], created=False)
    if len(exact) > 1:
        where = ", ".join(f"{v.name} ({v.id}, {v.dataCenterId})" for v in exact)
        raise UsageError(
            f"several network volumes match {wanted!r}: {where}",
            hint="set the volume name and data center exactly",
        )
    if not allow_create_volume:
        others = ", ".join(sorted({f"{v.name} ({v.dataCenterId})" for v in volumes})) or "none"
        dc = f" in {data_center}" if data_center else ""
        raise NotAuthorised(
            f"no network volume named {wanted!r}{dc} (existing: {others}); "
            f"creating one costs money",
            flag="--allow-create-volume",
        )
    if data_center is None:
        raise UsageError(
            f"creating volume {wanted!r} needs a data center",
            hint="set data_center in proctor.toml or pass --data-center",
        )
    created = client.create_network_volume(
        NetworkVolumeCreateInput(name=wanted, size=size_gb, dataCenterId=data_center)
    )
    return VolumeChoice(created, created=True)
