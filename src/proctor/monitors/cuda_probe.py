"""`python -m proctor.monitors.cuda_probe [BYTES]`: a tiny CUDA check on every visible GPU.

Through the driver API (libcuda, ctypes), so no framework is needed: on each device, a
primary context, two allocations of BYTES, a host-to-device copy of a random pattern, a
device-to-device copy, a device-to-host copy back, and a comparison; then everything is freed
and the context released. Prints one JSON line:

    {"ok": bool, "driver_version": int, "devices": [{"ordinal", "uuid", "pci_bus_id", "name",
     "ok", "bytes", "seconds", "error"}], "error": str | null}

CUDA_VISIBLE_DEVICES applies as for any CUDA program: this is what the run will see.
Run by gpu_health.run_probe in a child process, never inside proctor itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from typing import Any


class CudaError(Exception):
    pass


def _load() -> ctypes.CDLL:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CudaError("libcuda not found (no NVIDIA driver here)")


def _check(cuda: ctypes.CDLL, result: int, what: str) -> None:
    if result == 0:
        return
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(result, ctypes.byref(name))
    text = name.value.decode() if name.value else f"error {result}"
    raise CudaError(f"{what}: {text}")


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def check_device(cuda: ctypes.CDLL, ordinal: int, size: int) -> dict[str, Any]:
    dev = ctypes.c_int()
    _check(cuda, cuda.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
    out: dict[str, Any] = {"ordinal": ordinal, "ok": False, "bytes": size, "error": None}
    raw = ctypes.create_string_buffer(16)
    # _v2 since CUDA 11.4; the first form is the one older drivers have.
    get_uuid = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
    _check(cuda, get_uuid(raw, dev), "cuDeviceGetUuid")
    out["uuid"] = _uuid(raw.raw)
    bus = ctypes.create_string_buffer(64)
    if cuda.cuDeviceGetPCIBusId(bus, 64, dev) == 0:
        out["pci_bus_id"] = bus.value.decode()
    name = ctypes.create_string_buffer(256)
    if cuda.cuDeviceGetName(name, 256, dev) == 0:
        out["name"] = name.value.decode()
    ctx = ctypes.c_void_p()
    a, b = ctypes.c_uint64(0), ctypes.c_uint64(0)
    started = time.perf_counter()
    _check(cuda, cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    try:
        _check(cuda, cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        _check(cuda, cuda.cuMemAlloc_v2(ctypes.byref(a), ctypes.c_size_t(size)), "cuMemAlloc")
        _check(cuda, cuda.cuMemAlloc_v2(ctypes.byref(b), ctypes.c_size_t(size)), "cuMemAlloc")
        pattern = os.urandom(size)
        src = ctypes.create_string_buffer(pattern, size)
        back = ctypes.create_string_buffer(size)
        _check(cuda, cuda.cuMemcpyHtoD_v2(a, src, ctypes.c_size_t(size)), "cuMemcpyHtoD")
        _check(cuda, cuda.cuMemcpyDtoD_v2(b, a, ctypes.c_size_t(size)), "cuMemcpyDtoD")
        _check(cuda, cuda.cuMemcpyDtoH_v2(back, b, ctypes.c_size_t(size)), "cuMemcpyDtoH")
        if back.raw != pattern:
            raise CudaError("the bytes copied back differ from those sent")
        out["ok"] = True
    except CudaError as exc:
        out["error"] = str(exc)
    finally:
        for ptr in (a, b):
            if ptr.value:
                cuda.cuMemFree_v2(ptr)
        cuda.cuDevicePrimaryCtxRelease_v2(dev)
    out["seconds"] = round(time.perf_counter() - started, 4)
    return out


def probe(size: int) -> dict[str, Any]:
    try:
        cuda = _load()
        cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        cuda.cuMemcpyDtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
        cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        _check(cuda, cuda.cuInit(0), "cuInit")
        version = ctypes.c_int()
        cuda.cuDriverGetVersion(ctypes.byref(version))
        count = ctypes.c_int()
        _check(cuda, cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    except CudaError as exc:
        return {"ok": False, "devices": [], "error": str(exc)}
    devices = []
    for ordinal in range(count.value):
        try:
            devices.append(check_device(cuda, ordinal, size))
        except CudaError as exc:
            devices.append({"ordinal": ordinal, "ok": False, "error": str(exc)})
    return {
        "ok": bool(devices) and all(d["ok"] for d in devices),
        "driver_version": version.value,
        "devices": devices,
        "error": None if devices else "CUDA sees no device",
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    size = int(args[0]) if args else 8 * 1024 * 1024
    print(json.dumps(probe(size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
