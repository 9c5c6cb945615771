"""Pydantic models for what proctor sends to and reads from the Runpod REST API v1.

Field names are exactly those of `rest-v1-openapi.json` (camelCase), so a model dumps straight
into a request body. Inputs forbid unknown fields (a typo must not be silently dropped); responses
ignore them (the API grows fields without notice).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DesiredStatus = Literal["RUNNING", "EXITED", "TERMINATED"]
CloudType = Literal["SECURE", "COMMUNITY"]

#: The statuses in which a pod no longer bills for GPUs.
STOPPED_STATUSES: frozenset[str] = frozenset({"EXITED", "TERMINATED"})

#: `PodCreateInput.gpuTypeIds` enum of rest-v1-openapi.json (a8f5aebc). v1 has no GPU-type listing
#: endpoint, so this static list is what proctor can check a configured type against.
KNOWN_GPU_TYPE_IDS: tuple[str, ...] = (
    "NVIDIA GeForce RTX 4090",
    "NVIDIA A40",
    "NVIDIA RTX A5000",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA RTX A4500",
    "NVIDIA L40S",
    "NVIDIA H200",
    "NVIDIA L4",
    "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA RTX 4000 Ada Generation",
    "NVIDIA RTX A6000",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA RTX 2000 Ada Generation",
    "NVIDIA RTX A4000",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA L40",
    "NVIDIA B200",
    "NVIDIA GeForce RTX 3080 Ti",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA GeForce RTX 3080",
    "NVIDIA GeForce RTX 3070",
    "AMD Instinct MI300X OAM",
    "NVIDIA GeForce RTX 4080 SUPER",
    "Tesla V100-PCIE-16GB",
    "Tesla V100-SXM2-32GB",
    "NVIDIA RTX 5000 Ada Generation",
    "NVIDIA GeForce RTX 4070 Ti",
    "NVIDIA RTX 4000 SFF Ada Generation",
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA RTX A2000",
    "NVIDIA GeForce RTX 4080",
    "NVIDIA A30",
    "NVIDIA GeForce RTX 5080",
    "Tesla V100-FHHL-16GB",
    "NVIDIA H200 NVL",
    "Tesla V100-SXM2-16GB",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA A5000 Ada",
    "Tesla V100-PCIE-32GB",
    "NVIDIA  RTX A4500",
    "NVIDIA  A30",
    "NVIDIA GeForce RTX 3080TI",
    "Tesla T4",
    "NVIDIA RTX A30",
)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def body(self) -> dict[str, Any]:
        """The JSON request body: only the fields proctor set, so the API's defaults apply."""
        return self.model_dump(exclude_none=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PodCreateInput(_Input):
    name: str | None = Field(default=None, max_length=191)
    imageName: str | None = None
    templateId: str | None = None
    computeType: Literal["GPU", "CPU"] | None = None
    gpuTypeIds: list[str] | None = None
    gpuTypePriority: Literal["availability", "custom"] | None = None
    gpuCount: int | None = Field(default=None, ge=1)
    cloudType: CloudType | None = None
    dataCenterIds: list[str] | None = None
    dataCenterPriority: Literal["availability", "custom"] | None = None
    networkVolumeId: str | None = None
    volumeInGb: int | None = None
    volumeMountPath: str | None = None
    containerDiskInGb: int | None = None
    ports: list[str] | None = None
    env: dict[str, str] | None = Field(default=None, repr=False)  # may hold user secrets
    supportPublicIp: bool | None = None
    interruptible: bool | None = None
    locked: bool | None = None
    dockerEntrypoint: list[str] | None = None
    dockerStartCmd: list[str] | None = None
    allowedCudaVersions: list[str] | None = None
    countryCodes: list[str] | None = None
    minRAMPerGPU: int | None = None
    minVCPUPerGPU: int | None = None
    containerRegistryAuthId: str | None = None
    globalNetworking: bool | None = None


class NetworkVolumeCreateInput(_Input):
    name: str
    size: int = Field(ge=0, le=4000)
    dataCenterId: str


class GpuType(_Response):
    """The `gpu` object of a Pod (and `machine.gpuType`)."""

    id: str | None = None
    count: int | None = None
    displayName: str | None = None
    securePrice: float | None = None
    communityPrice: float | None = None


class PodMachine(_Response):
    gpuTypeId: str | None = None
    gpuType: GpuType | None = None
    dataCenterId: str | None = None
    location: str | None = None
    gpuDisplayName: str | None = None
    costPerHr: float | None = None
    secureCloud: bool | None = None
    supportPublicIp: bool | None = None


class PodNetworkVolume(_Response):
    id: str | None = None
    name: str | None = None
    size: int | None = None
    dataCenterId: str | None = None


class NetworkVolume(_Response):
    id: str
    name: str | None = None
    size: int | None = None
    dataCenterId: str | None = None


class Pod(_Response):
    id: str
    name: str | None = None
    desiredStatus: str | None = None  # RUNNING | EXITED | TERMINATED; str so a new value parses
    publicIp: str | None = None
    portMappings: dict[str, int] | None = None
    costPerHr: float | None = None  # the spec's own example is a string "0.74": parsed leniently
    adjustedCostPerHr: float | None = None
    gpu: GpuType | None = None
    gpuCount: int | None = None  # not in v1's Pod schema, but some responses carry it
    machine: PodMachine | None = None
    machineId: str | None = None
    image: str | None = None
    ports: list[str] | None = None
    networkVolume: PodNetworkVolume | None = None
    volumeMountPath: str | None = None
    volumeInGb: int | None = None
    containerDiskInGb: int | None = None
    interruptible: bool | None = None
    lastStartedAt: str | None = None
    lastStatusChange: str | None = None
    env: dict[str, str] | None = Field(default=None, repr=False)  # never printed or recorded

    @property
    def gpu_type_id(self) -> str | None:
        if self.gpu is not None and self.gpu.id:
            return self.gpu.id
        if self.machine is not None:
            return self.machine.gpuTypeId
        return None

    @property
    def gpu_count(self) -> int | None:
        if self.gpu is not None and self.gpu.count is not None:
            return self.gpu.count
        return self.gpuCount

    @property
    def gpu_name(self) -> str | None:
        if self.gpu is not None and self.gpu.displayName:
            return self.gpu.displayName
        if self.machine is not None and self.machine.gpuDisplayName:
            return self.machine.gpuDisplayName
        return self.gpu_type_id

    @property
    def ssh_port(self) -> int | None:
        """The public port mapped to the pod's port 22, once the pod has one."""
        return (self.portMappings or {}).get("22")

    def ssh_ready(self) -> bool:
        return self.desiredStatus == "RUNNING" and bool(self.publicIp) and bool(self.ssh_port)

    def evidence(self) -> tuple[object, ...]:
        """What changes when something happens to the pod: a retry needs this to move."""
        return (self.desiredStatus, self.publicIp, self.ssh_port, self.lastStatusChange)

    def to_record(self) -> dict[str, Any]:
        """Identity for record.json: no env (it may hold secrets)."""
        volume = self.networkVolume
        return {
            "pod_id": self.id,
            "name": self.name,
            "desired_status": self.desiredStatus,
            "gpu_type_id": self.gpu_type_id,
            "gpu_name": self.gpu_name,
            "gpu_count": self.gpu_count,
            "cost_per_hr": self.costPerHr,
            "image": self.image,
            "machine_id": self.machineId,
            "data_center_id": self.machine.dataCenterId if self.machine else None,
            "public_ip": self.publicIp,
            "ssh_port": self.ssh_port,
            "volume": volume.model_dump() if volume is not None else None,
            "volume_mount_path": self.volumeMountPath,
        }
