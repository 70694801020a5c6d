"""The launcher probe: environments set by torchrun, Slurm and MPI, and launch commands."""

from __future__ import annotations

import pytest

from ledger.record.capture.launcher import capture_launcher

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8",
         "SLURM_JOB_NODELIST": "gpu-[001-002]"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "r1", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2",
            "RANK": "3"}


@pytest.mark.parametrize(
    ("env", "argv", "expected"),
    [
        ({}, ["python", "train.py"], (None, None, None, None, None, None)),
        ({}, [], (None, None, None, None, None, None)),
        (TORCHRUN, [], ("torchrun", 2, 16, 8, None, None)),
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, [], ("torchrun", 1, 4, 4, None, None)),
        (SLURM, ["python", "train.py"], ("slurm", 2, 16, 8, "gpu-[001-002]", "4242")),
        ({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "4", "SLURM_TASKS_PER_NODE": "8(x4)",
          "SLURM_NODELIST": "n[1-4]"}, [], ("slurm", 4, 32, 8, "n[1-4]", "7")),
        ({"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "8,4"}, [],
         ("slurm", 2, None, None, None, "7")),
        ({**SLURM, **TORCHRUN}, [], ("slurm+torchrun", 2, 16, 8, "gpu-[001-002]", "4242")),
        ({"OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, [],
         ("mpi", 2, 16, 8, None, None)),
        ({"PMI_SIZE": "4"}, [], ("mpi", None, 4, None, None, None)),
        ({"PMI_SIZE": "16", **SLURM}, [], ("slurm", 2, 16, 8, "gpu-[001-002]", "4242")),
        # launch commands: the wrapper runs outside torchrun
        ({}, ["torchrun", "--nnodes", "2", "--nproc_per_node", "8", "pretrain_gpt.py", "--nnodes", "9"],
         ("torchrun", 2, 16, 8, None, None)),
        ({}, ["/opt/venv/bin/torchrun", "--nnodes=2:2", "--nproc-per-node=4", "--rdzv-backend", "c10d",
              "--rdzv-endpoint", "host:29500", "train.py"], ("torchrun", 2, 8, 4, None, None)),
        ({}, ["torchrun", "--standalone", "--nproc_per_node", "8", "train.py"],
         ("torchrun", 1, 8, 8, None, None)),
        ({}, ["torchrun", "--nproc_per_node", "2", "-m", "runners.moe"], ("torchrun", 1, 2, 2, None, None)),
        ({}, ["torchrun", "--nnodes", "1:4", "--nproc_per_node", "8", "train.py"],
         ("torchrun", None, None, 8, None, None)),
        ({}, ["torchrun", "--nproc_per_node", "gpu", "train.py"], ("torchrun", 1, None, None, None, None)),
        ({}, ["python", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "8", "t.py"],
         ("torchrun", 2, 16, 8, None, None)),
        ({}, ["python3", "-u", "-m", "torch.distributed.launch", "--nproc_per_node=2", "--use_env", "t.py"],
         ("torchrun", 1, 2, 2, None, None)),
        ({}, ["python", "-mtorch.distributed.run", "--nproc-per-node", "4", "t.py"],
         ("torchrun", 1, 4, 4, None, None)),
        (SLURM, ["torchrun", "--nnodes", "1", "--nproc_per_node", "8", "train.py"],
         ("slurm+torchrun", 1, 8, 8, "gpu-[001-002]", "4242")),
        (SLURM, ["srun", "--exclusive", "-N2", "--ntasks-per-node", "1", "torchrun", "--nnodes", "2",
                 "--nproc_per_node", "8", "train.py"], ("slurm+torchrun", 2, 16, 8, "gpu-[001-002]", "4242")),
        ({}, ["srun", "-N", "4", "--ntasks-per-node=8", "python", "train.py"],
         ("slurm", 4, 32, 8, None, None)),
        ({}, ["mpirun", "-np", "16", "-npernode", "8", "--bind-to", "none", "python", "train.py"],
         ("mpi", 2, 16, 8, None, None)),
        # a training script's own flags are not launcher options
        ({}, ["python", "train.py", "--nnodes", "4", "-m", "torch.distributed.run"],
         (None, None, None, None, None, None)),
    ],
)
def test_capture_launcher(env: dict[str, str], argv: list[str], expected: tuple[object, ...]) -> None:
    found = capture_launcher(env, argv)
    assert (found.kind, found.nodes, found.world_size, found.ranks_per_node, found.node_list,
            found.job_id) == expected
