"""The container probe: which runtime, which image, and the NGC version variables.

Only what the environment and a few well-known files reveal; nothing is inferred (an NGC PyTorch version
does not name an image tag). ``root`` lets tests build a fake filesystem root.

Runtime markers, first match wins (the most specific first):

- apptainer: APPTAINER_CONTAINER, SINGULARITY_CONTAINER, APPTAINER_NAME or SINGULARITY_NAME (singularity
  is recorded as apptainer: the same runtime under its old name, not a change of container);
- enroot: ENROOT_*, NVIDIA_ENROOT or PYXIS_* variables, or an ``/etc/enroot`` directory;
- podman: ``/run/.containerenv`` (whose ``image=`` and ``imageid=`` lines are used), container=podman, or a
  cgroup path mentioning libpod;
- kubernetes: KUBERNETES_SERVICE_HOST or a kubepods cgroup (the node's runtime is the cluster's business);
- docker: ``/.dockerenv``, or ``/proc/1/cgroup`` / ``/proc/self/cgroup`` mentioning docker;
- otherwise the systemd ``container`` variable (lxc, systemd-nspawn, ...), else None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ledger.record.capture._util import error_text, read_text
from schemas.receipt import Container

NGC_VARS = (
    "NVIDIA_PYTORCH_VERSION", "NVIDIA_TENSORFLOW_VERSION", "NVIDIA_BUILD_ID", "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_PRODUCT_NAME", "PYTORCH_VERSION", "PYTORCH_BUILD_VERSION", "PYTORCH_BUILD_NUMBER", "NEMO_VERSION",
    "CUDA_VERSION", "CUDA_DRIVER_VERSION", "CUDNN_VERSION", "NCCL_VERSION", "CUBLAS_VERSION", "CUFFT_VERSION",
    "CURAND_VERSION", "CUSPARSE_VERSION", "CUSPARSELT_VERSION", "CUSOLVER_VERSION", "CUTENSOR_VERSION",
    "CUDNN_FRONTEND_VERSION", "NPP_VERSION", "NVJPEG_VERSION", "TRT_VERSION", "TRTOSS_VERSION",
    "TRANSFORMER_ENGINE_VERSION", "DALI_VERSION", "DALI_BUILD", "OPENMPI_VERSION", "HPCX_VERSION",
    "MOFED_VERSION", "RDMACORE_VERSION", "GDRCOPY_VERSION", "NSIGHT_SYSTEMS_VERSION",
    "NSIGHT_COMPUTE_VERSION", "POLYGRAPHY_VERSION", "MAGMA_VERSION", "TENSORRT_VERSION",
)
"""Version variables NGC images set; any other NVIDIA_*VERSION variable is kept too."""
_NGC_PATTERN = re.compile(r"NVIDIA_\w*VERSION")

IMAGE_VARS = ("LEDGER_CONTAINER_IMAGE", "CONTAINER_IMAGE", "SLURM_CONTAINER_IMAGE", "PYXIS_CONTAINER_IMAGE",
              "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "APPTAINER_NAME", "SINGULARITY_NAME")
"""Variables that may name the image, in order of preference."""
DIGEST_VARS = ("LEDGER_CONTAINER_DIGEST", "CONTAINER_IMAGE_DIGEST", "IMAGE_DIGEST", "CONTAINER_DIGEST")
"""Variables that may hold the image's content digest."""

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def capture_container(env: Mapping[str, str], root: Path = Path("/")) -> Container:
    """Runtime, image, digest and NGC variables of the container this process runs in (all None and
    empty outside one)."""
    ngc = {k: v for k, v in sorted(env.items()) if k in NGC_VARS or _NGC_PATTERN.fullmatch(k)}
    try:
        found = _runtime(env, root)
        image = found.get("image") or next((env[k] for k in IMAGE_VARS if env.get(k)), None)
        digest = found.get("digest") or _first_digest(env.get(k) for k in DIGEST_VARS)
        if image and "@sha256:" in image:  # a pinned reference carries its digest
            digest = digest or _first_digest([image])
        return Container(runtime=found.get("runtime"), image=image, digest=digest, ngc=ngc)
    except Exception as exc:
        return Container(ngc=ngc, error=error_text(exc))


def _runtime(env: Mapping[str, str], root: Path) -> dict[str, Any]:
    """The runtime and what its own marker file says about the image."""
    if any(env.get(k) for k in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "APPTAINER_NAME",
                                 "SINGULARITY_NAME")):
        return {"runtime": "apptainer"}
    if (any(k.startswith(("ENROOT_", "PYXIS_")) for k in env) or "NVIDIA_ENROOT" in env
            or (root / "etc/enroot").is_dir()):
        return {"runtime": "enroot"}
    cgroup = " ".join(read_text(root / f"proc/{pid}/cgroup", 1 << 16) or "" for pid in ("1", "self"))
    containerenv = read_text(root / "run/.containerenv")
    if containerenv is not None or env.get("container") == "podman" or "libpod" in cgroup:
        return {"runtime": "podman", **_containerenv(containerenv or "")}
    if env.get("KUBERNETES_SERVICE_HOST") or "kubepods" in cgroup:
        return {"runtime": "kubernetes"}
    if (root / ".dockerenv").exists() or "docker" in cgroup:
        return {"runtime": "docker"}
    if env.get("container"):  # the systemd convention (lxc, systemd-nspawn, ...)
        return {"runtime": env["container"]}
    return {}


def _containerenv(text: str) -> dict[str, str]:
    """image and digest from podman's ``/run/.containerenv`` (``key="value"`` lines). ``imageid`` is the
    image's config digest, which identifies its content as well as a registry digest does."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    found = {}
    if fields.get("image"):
        found["image"] = fields["image"]
    imageid = fields.get("imageid", "")
    if _HEX64.fullmatch(imageid):
        found["digest"] = f"sha256:{imageid}"
    elif _DIGEST.fullmatch(imageid):
        found["digest"] = imageid
    return found


def _first_digest(values: Any) -> str | None:
    """The first ``sha256:<64 hex>`` in any of the values (a bare 64-hex value counts too)."""
    for value in values:
        if not value:
            continue
        m = _DIGEST.search(value)
        if m:
            return m.group(0)
        if _HEX64.fullmatch(value.strip()):
            return f"sha256:{value.strip()}"
    return None


__all__ = ["IMAGE_VARS", "NGC_VARS", "capture_container"]
