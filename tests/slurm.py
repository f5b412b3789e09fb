"""A single-node Slurm cluster of its own, in one folder: its munge key and daemon, its slurm.conf, state,
spool and logs, on ports picked free; for tests that submit jobs as an instructor types them. The node is
this machine as `slurmd -C` sees it (its cores and memory), so a request too big for it is too big here."""
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel")
PARTITION = "course"  # its one partition, all of the node
PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"  # Debian puts the daemons in /usr/sbin


def missing() -> str | None:
    """Why no cluster can be started here, or None: the packages or root (slurmd runs jobs as their user)."""
    absent = [name for name in DAEMONS + COMMANDS if shutil.which(name, path=PATH) is None]
    if absent:
        return f"{', '.join(absent)} not installed (Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a Slurm node's slurmd runs as root"
    return None


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # the environment a user of this cluster has: SLURM_CONF names its slurm.conf
    node: str
    cpus: int
    memory_mb: int
    partition: str = PARTITION

    def run(self, *command, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm command as this cluster's user types it; failing unless ``check`` is off."""
        done = subprocess.run([str(c) for c in command], cwd=self.folder, env=self.env, capture_output=True,
                              text=True, timeout=60)
        if check and done.returncode:
            raise AssertionError(f"{' '.join(map(str, command))} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done

    def jobs(self, *ids: str) -> list[tuple[str, str, str, str]]:
        """The jobs pending or running (with ``ids``, those jobs in any state, finished ones included):
        (id, name, state, reason); an array's tasks one by one once they have started."""
        which = ["--states=all", f"--jobs={','.join(ids)}"] if ids else []
        listed = self.run("squeue", "--noheader", "--format=%i|%j|%T|%r", *which).stdout.splitlines()
        return [tuple(line.split("|")) for line in listed]

    def wait(self, *ids: str, timeout: float) -> dict[str, str]:
        """Wait until no job is pending or running; then each of ``ids``' jobs (an array's tasks) -> its final
        state. Fails with the queue and the daemons' logs after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while queued := self.jobs():
            if time.monotonic() > deadline:
                raise AssertionError(f"still queued after {timeout} s: {queued}\n{self.logs()}")
            time.sleep(0.5)
        return {job: state for job, _, state, _ in self.jobs(*ids)}

    def logs(self, *folders: Path) -> str:
        """The daemons' logs, and the jobs' logs in ``folders``: their ends."""
        files = [p for folder in (self.folder, *folders) for p in sorted(folder.glob("*.log"))]
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in files)


def _free_ports(count: int) -> list[int]:
    """Ports no one listens on now, all different (each held while the next is picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _node() -> dict[str, str]:
    """This machine as slurmd sees it: NodeName, CPUs, Boards, ..., RealMemory."""
    line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True, env={"PATH": PATH}).stdout
    return dict(word.split("=", 1) for word in line.splitlines()[0].split())


def _config(folder: Path, node: dict[str, str]) -> str:
    hardware = " ".join(f"{k}={v}" for k, v in node.items() if k != "NodeName")
    controller, daemon = _free_ports(2)
    return f"""\
ClusterName=course
SlurmctldHost={node['NodeName']}(127.0.0.1)
SlurmctldPort={controller}
SlurmdPort={daemon}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder / 'munge.socket'}
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'slurmctld.log'}
SlurmdLogFile={folder / 'slurmd.log'}
PlugStackConfig={folder / 'plugstack.conf'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Finished jobs stay listed (squeue --states=all) for ten minutes; a cancelled job's processes get 5 s.
MinJobAge=600
KillWait=5
NodeName={node['NodeName']} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _started(command: list, log: Path) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={"PATH": PATH})


def _stopped(daemons: list[subprocess.Popen]) -> None:
    for daemon in reversed(daemons):
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()


def _drained(cluster: Cluster, deadline: float) -> None:
    """Wait until the queue is empty, the controller gone, or the deadline passed."""
    while time.monotonic() < deadline:
        queue = cluster.run("squeue", "--noheader", check=False)
        if queue.returncode or not queue.stdout.strip():
            return
        time.sleep(0.2)


@contextmanager
def single_node_cluster(folder: Path, timeout: float = 30) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd in ``folder`` and wait until the node is idle; at the end cancel
    every job and stop the daemons, whatever happened in between."""
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(parents=True)
    (folder / "plugstack.conf").write_text("")
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    node = _node()
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, node))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(folder, env, node["NodeName"], int(node["CPUs"]), int(node["RealMemory"]))
    daemons = []
    try:
        daemons.append(_started(["munged", "--foreground", "--force", f"--socket={folder / 'munge.socket'}",
                                 f"--key-file={key}", f"--pid-file={folder / 'munge' / 'munged.pid'}",
                                 f"--seed-file={folder / 'munge' / 'munged.seed'}",
                                 f"--log-file={folder / 'munged.log'}"], folder / "munged.out"))
        deadline = time.monotonic() + timeout
        while not (folder / "munge.socket").exists():
            if time.monotonic() > deadline or daemons[0].poll() is not None:
                raise AssertionError(f"munged did not start:\n{(folder / 'munged.out').read_text()}")
            time.sleep(0.1)
        daemons.append(_started(["slurmctld", "-D", "-f", conf], folder / "slurmctld.out"))
        daemons.append(_started(["slurmd", "-D", "-f", conf, "-N", cluster.node], folder / "slurmd.out"))
        while "idle" not in cluster.run("sinfo", "--noheader", "--format=%T", check=False).stdout:
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                raise AssertionError(f"the node did not come up:\n{cluster.logs()}")
            time.sleep(0.2)
        yield cluster
    finally:
        if len(daemons) == len(DAEMONS):  # jobs ended by Slurm, before their slurmd stops
            subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
            _drained(cluster, time.monotonic() + timeout)
        _stopped(daemons)
