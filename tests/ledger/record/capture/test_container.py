"""The container probe against fake filesystem roots and environments."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger.record.capture.container import capture_container

DIGEST = "a" * 64


def make_root(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            path.mkdir(exist_ok=True)
        else:
            path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "env", "runtime", "image", "digest"),
    [
        ({}, {}, None, None, None),
        ({"proc/1/cgroup": "0::/init.scope\n"}, {}, None, None, None),
        ({".dockerenv": ""}, {}, "docker", None, None),
        ({"proc/1/cgroup": "12:memory:/docker/3f2a1b\n0::/\n"}, {}, "docker", None, None),
        ({"run/.containerenv": f'engine="podman-4.9.3"\nname="t"\nimage="quay.io/org/train:1.2"\n'
                               f'imageid="{DIGEST}"\nrootless=1\n'},
         {}, "podman", "quay.io/org/train:1.2", f"sha256:{DIGEST}"),
        ({"run/.containerenv": ""}, {}, "podman", None, None),
        ({"proc/self/cgroup": "0::/machine.slice/libpod-abc.scope\n"}, {}, "podman", None, None),
        ({}, {"APPTAINER_CONTAINER": "/images/pytorch_24.05.sif", "APPTAINER_NAME": "pytorch_24.05.sif"},
         "apptainer", "/images/pytorch_24.05.sif", None),
        ({}, {"SINGULARITY_CONTAINER": "/images/old.sif"}, "apptainer", "/images/old.sif", None),
        ({}, {"ENROOT_ROOTFS": "/tmp/enroot/data/pyxis_1"}, "enroot", None, None),
        ({"etc/enroot/": ""}, {}, "enroot", None, None),
        ({}, {"PYXIS_VERSION": "0.20"}, "enroot", None, None),
        ({".dockerenv": ""}, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "train-0"}, "kubernetes",
         None, None),
        ({"proc/1/cgroup": "0::/kubepods/besteffort/pod1\n"}, {}, "kubernetes", None, None),
        ({".dockerenv": ""}, {"CONTAINER_IMAGE": "nvcr.io/nvidia/pytorch:25.04-py3",
                              "CONTAINER_IMAGE_DIGEST": f"sha256:{DIGEST}"},
         "docker", "nvcr.io/nvidia/pytorch:25.04-py3", f"sha256:{DIGEST}"),
        ({}, {"CONTAINER_IMAGE": f"nvcr.io/nvidia/pytorch@sha256:{DIGEST}"}, None,
         f"nvcr.io/nvidia/pytorch@sha256:{DIGEST}", f"sha256:{DIGEST}"),
        ({}, {"container": "lxc"}, "lxc", None, None),
    ],
)
def test_runtime_image_and_digest(
    tmp_path: Path, files: dict[str, str], env: dict[str, str], runtime: str | None, image: str | None,
    digest: str | None,
) -> None:
    found = capture_container(env, make_root(tmp_path, files))
    assert (found.runtime, found.image, found.digest, found.error) == (runtime, image, digest, None)


def test_ngc_variables(tmp_path: Path) -> None:
    env = {
        "NVIDIA_PYTORCH_VERSION": "25.04", "NVIDIA_BUILD_ID": "157086089", "CUDA_VERSION": "12.9.0.043",
        "CUDNN_VERSION": "9.9.0.52", "NCCL_VERSION": "2.26.3", "CUBLAS_VERSION": "12.9.0.2",
        "TRT_VERSION": "10.9.0.34", "PYTORCH_VERSION": "2.7.0a0+79aa17489c", "NEMO_VERSION": "2.3.0",
        "NVIDIA_DALI_VERSION": "1.48", "HOME": "/root", "CUDA_HOME": "/usr/local/cuda",
    }
    ngc = capture_container(env, make_root(tmp_path, {})).ngc
    assert ngc == {k: v for k, v in env.items() if k not in ("HOME", "CUDA_HOME")}
    assert list(ngc) == sorted(ngc)


def test_unreadable_markers_do_not_raise(tmp_path: Path) -> None:
    root = make_root(tmp_path, {"proc/1/cgroup/": "", "run/.containerenv/": ""})  # directories, not files
    found = capture_container({}, root)
    assert found.error is None and found.runtime is None


def test_this_machine() -> None:
    found = capture_container(os.environ)
    assert found.error is None
