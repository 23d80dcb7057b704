"""A single-node SLURM on localhost for the tests, from Debian's packages (tests/install_slurm.sh).

There is no systemd: munged, slurmctld and slurmd are started by hand as daemons, each with its
files (key, socket, state, logs, PID files) in one temporary folder, on free ports, and stopped
by their PID files. The node offers two fake GPUs (plain files as devices) in a `gpu` partition,
so the SLURM profile's GPU requests are scheduled as written. Accounting is off: Snakemake's
plugin is told to poll with squeue, and MinJobAge keeps finished jobs visible to it.

The configuration goes to /etc/slurm (where srun looks: the plugin's job step drops SLURM_CONF
from srun's environment), marked as ours; an existing configuration that is not ours is never
touched (the tests then skip), and ours is removed when the cluster stops.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import waits

# the text predates tests/helpers/: kept, so that a config an older checkout left is still known
# held while a cluster of the tests runs: a second test session on the machine waits for the
# first one's cluster to stop instead of overwriting its configuration
LOCK = "jtc-test-cluster.lock"
MARKER = "# jtc test cluster: written by tests/slurm_cluster.py, removed when it stops"
CONF_DIR = Path("/etc/slurm")
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo")


def missing_binaries() -> list[str]:
    def found(name: str) -> bool:
        return bool(shutil.which(name) or shutil.which(name, path="/usr/sbin"))

    return [name for name in DAEMONS + CLIENTS if not found(name)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\tZ" in status.read_text())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


class ForeignConfig(RuntimeError):
    """A SLURM configuration that the tests did not write is in the way."""


class LocalSlurm:
    def __init__(self, root: Path, conf_dir: Path = CONF_DIR):
        self.root = root
        self.conf = conf_dir / "slurm.conf"
        self.gres = conf_dir / "gres.conf"
        self.lock = conf_dir / LOCK
        self._held = None
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _binary(self, name: str) -> str:
        return shutil.which(name) or shutil.which(name, path="/usr/sbin") or name

    def _take_lock(self, timeout: float = 1800.0) -> None:
        """Hold the machine's test-cluster lock (/etc/slurm/jtc-test-cluster.lock), waiting
        while another test session's cluster runs."""
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock, "a")  # noqa: SIM115 - closed in stop()
        patience = waits.Patience(timeout, f"another test session's SLURM to stop ({self.lock})")
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._held = handle
                return
            except BlockingIOError:
                if patience.left() <= 0:
                    handle.close()
                    raise RuntimeError(patience.message()) from None
                time.sleep(1.0)

    def _write_config(self) -> None:
        for path in (self.conf, self.gres):
            if path.exists() and MARKER not in path.read_text():
                raise ForeignConfig(f"{path} exists and was not written by the tests")
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        r = self.root
        for folder in ("state", "spool", "log"):
            (r / folder).mkdir(parents=True, exist_ok=True)
        for i in range(2):
            (r / f"fake_gpu{i}").touch()
        cpus = os.cpu_count() or 1
        memory = int(_memory_mb() * 0.8)
        self.gres.write_text(f"{MARKER}\nNodeName=localhost Name=gpu File={r}/fake_gpu[0-1]\n")
        self.conf.write_text(
            "\n".join(
                [
                    MARKER,
                    "ClusterName=jtctest",
                    "SlurmctldHost=localhost",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={r}/munge.socket",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    f"StateSaveLocation={r}/state",
                    f"SlurmdSpoolDir={r}/spool",
                    f"SlurmctldPidFile={r}/slurmctld.pid",
                    f"SlurmdPidFile={r}/slurmd.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd.log",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    "ReturnToService=2",
                    "MinJobAge=3600",  # finished jobs stay visible to squeue
                    "DefMemPerCPU=1000",  # else each job takes the node's whole memory
                    "MpiDefault=none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "GresTypes=gpu",
                    f"NodeName=localhost CPUs={cpus} RealMemory={memory} Gres=gpu:2 State=UNKNOWN",
                    "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                    "PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; return once the node is idle (at most `timeout`
        seconds on an idle machine, stretched on a busy one: waits.py)."""
        self._take_lock()
        self._write_config()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, env=self.env)  # noqa: E731
        r = self.root
        run(
            self._binary("munged"),
            "--force",
            f"--key-file={key}",
            f"--socket={r}/munge.socket",
            f"--pid-file={r}/munged.pid",
            f"--log-file={r}/log/munged.log",
            f"--seed-file={r}/munged.seed",
        )
        run(self._binary("slurmctld"), "-f", str(self.conf))
        run(self._binary("slurmd"), "-f", str(self.conf), "-N", "localhost")
        patience = waits.Patience(timeout, "SLURM's node to be idle (sinfo)")
        while patience.left() > 0:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env
            ).stdout.split()
            if state and all(s == "idle" for s in state):
                return
            time.sleep(0.3)
        raise RuntimeError(f"SLURM did not come up: {patience.message()}; see the logs in {r}/log")

    def _squeue(self, *fields: str) -> list[list[str]]:
        out = subprocess.run(
            ["squeue", "--states=all", "--noheader", *fields],
            capture_output=True,
            text=True,
            env=self.env,
        ).stdout
        return [[f.strip() for f in line.split("|")] for line in out.splitlines() if line.strip()]

    def jobs(self) -> list[dict[str, str]]:
        """Jobs of every state: id, state, partition, the GPUs asked for (tres-per-job) and
        comment (the plugin writes the rule and wildcards there)."""
        gpus = {row[0]: row[1] for row in self._squeue("--Format=JobID:|,tres-per-job:|")}
        rows = self._squeue("--format=%i|%T|%P|%k")
        return [
            {"id": i, "state": s, "partition": p, "gpus": gpus.get(i, ""), "comment": c}
            for i, s, p, c in rows
        ]

    def cancel(self, job_id: str) -> None:
        subprocess.run(["scancel", job_id], check=True, env=self.env)

    def stop(self, grace: float = 10.0) -> None:
        """Cancel what is left, then stop the daemons by their PID files (SIGTERM, then
        SIGKILL after `grace` seconds), and remove our configuration. Nothing, when this
        cluster never took the machine's lock (another session's cluster is left alone)."""
        if self._held is None:
            return
        subprocess.run(["scancel", "--user=root"], capture_output=True, env=self.env)
        pids = []
        for name in ("slurmd", "slurmctld", "munged"):
            try:
                pid = int((self.root / f"{name}.pid").read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for path in (self.conf, self.gres):
            if path.exists() and MARKER in path.read_text():
                path.unlink()
        if self._held is not None:
            self._held.close()  # (the lock goes with it)
            self._held = None
