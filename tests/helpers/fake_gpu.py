"""A fake nvidia-smi, for tests on machines without a GPU: it answers the queries jtc makes
(the GPU's index, UUID, name, memory and compute capability; utilisation and memory used; each
process's memory, here every running workflow job's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SCRIPT = """#!{python}
import os, sys
GPU = {{
    "index": "0",
    "uuid": "GPU-00000000-fake",
    "name": {name!r},
    "memory.total": "{memory_mib}",
    "mig.mode.current": "{mig}",
    "compute_cap": "{capability}",
    "utilization.gpu": "{utilisation}",
    "memory.used": "{used_mib}",
}}
query = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if query:
    if {old_driver} and {{"mig.mode.current", "compute_cap"}} & set(query[0]):
        print('Field "compute_cap" is not a valid field to query.', file=sys.stderr)
        sys.exit(2)
    print(", ".join(GPU[field] for field in query[0]))
elif any(a.startswith("--query-compute-apps=") for a in sys.argv[1:]):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b".snakemake/scripts/tmp" in open(f"/proc/{{pid}}/cmdline", "rb").read():
                print(f"{{pid}}, {process_mib}")
        except OSError:
            pass
else:
    sys.exit(2)
"""


def fake_nvidia_smi(
    folder: Path,
    memory_mib: int = 100_000,
    capability: str = "8.0",
    name: str = "NVIDIA A100-SXM4-80GB",
    old_driver: bool = False,
    mig: bool = False,
    utilisation: int = 37,
    used_mib: int = 2048,
    process_mib: int = 123,
) -> dict[str, str]:
    """Write folder/nvidia-smi: one GPU of `memory_mib` MiB and compute `capability` (neither
    it nor the MIG mode reported with `old_driver`), split into MIG slices with `mig`,
    `utilisation` % busy with `used_mib` MiB used, and `process_mib` MiB held by each running
    workflow job. Returns the environment variables
    that put it first on PATH, with CUDA_VISIBLE_DEVICES=0."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(
        SCRIPT.format(
            python=sys.executable,
            old_driver=old_driver,
            mig="Enabled" if mig else "Disabled",
            name=name,
            memory_mib=memory_mib,
            capability=capability,
            utilisation=utilisation,
            used_mib=used_mib,
            process_mib=process_mib,
        )
    )
    smi.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}
