"""A job of three processes on the shm fabric, each started the way a
launcher starts it (NESSIE_NODE_ID and NESSIE_NODES), running the example
shuffle."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "shuffle.py"


def test_three_processes_shuffle_on_shm(unique_name, tmp_path):
    procs = []
    for rank in range(3):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))},
            "NESSIE_NODE_ID": str(rank),
            "NESSIE_NODES": "3",
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(EXAMPLE),
                    "--fabric",
                    "shm",
                    "--cluster",
                    unique_name,
                    "--shm-dir",
                    str(tmp_path),
                    "--records",
                    "3000",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outputs.append(out)
        assert p.returncode == 0, out
    assert "validated" in outputs[0], outputs[0]
