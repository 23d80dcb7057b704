"""Jobs end with their run (jtc.pipeline.watchdog), and a folder locked by processes that still
work in it
is explained (jtc.pipeline.locks.held_lock_message): fake runs and jobs, plain processes, no
Snakemake."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import waits

from jtc.pipeline import locks, watchdog

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads /proc (Linux only)"
)

# a job: watches its run (twice as often as a real job, to keep the test short), starts a
# process of its own, says both are ready in the file argv[1] and waits
JOB = """
import subprocess, sys, time
from pathlib import Path
from jtc.pipeline.watchdog import end_with_parent_run
watching = end_with_parent_run(poll_s=0.1) is not None
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
Path(sys.argv[1] + ".tmp").write_text(f"{helper.pid} {watching}")
Path(sys.argv[1] + ".tmp").rename(sys.argv[1])
time.sleep(60)
"""

# a run: marks itself (JTC_RUN, unless argv[2] names another host), starts the job and waits
RUN = """
import os, subprocess, sys, time
from jtc.pipeline.watchdog import ENV, mark_run
run = mark_run()
if sys.argv[2] != "-":
    os.environ[ENV] = os.environ[ENV].replace(f"host={run.host} ", f"host={sys.argv[2]} ")
log = open(sys.argv[1] + ".log", "w")
job = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1]], stderr=log)
time.sleep(60)
"""


def _gone(pid):
    """Whether the process has ended (a zombie nobody reaped counts as ended)."""
    stat = watchdog._stat(pid)
    return stat is None or stat[0] in "ZX"


def _wait_for(condition, timeout=10.0, step=0.02):
    """Whether `condition()` came to hold within `timeout` seconds on an idle machine,
    stretched on a busy one (waits.py)."""
    patience = waits.Patience(timeout, "a condition")
    while patience.left() > 0:
        if condition():
            return True
        time.sleep(step)
    return condition()


def _job_of(run_pid):
    """The job the fake run started (its only child)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = watchdog._stat(entry.name)
            if stat is not None and stat[1] == run_pid:
                return int(entry.name)
    return None


def _kill(*pids):
    for pid in pids:
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def fake_run(tmp_path):
    """Start a fake run whose job watches it; returns (run, job PID, helper PID, job's stderr).
    Everything is killed afterwards."""
    started = []

    def start(host="-"):
        ready = tmp_path / "ready"
        run = subprocess.Popen(
            [sys.executable, "-c", RUN, str(ready), host, JOB], start_new_session=True
        )
        started.append(run)
        assert _wait_for(ready.exists), "the fake job did not start"
        helper, watching = ready.read_text().split()
        job = _job_of(run.pid)
        started.extend([job, int(helper)])
        assert watching == str(host == "-")
        return run, job, int(helper), Path(f"{ready}.log")

    yield start
    for item in started:
        if isinstance(item, subprocess.Popen):
            item.kill()
            item.wait()
        else:
            _kill(item)


def test_a_job_ends_itself_and_what_it_started_when_its_run_is_killed(fake_run):
    run, job, helper, log = fake_run()
    os.kill(run.pid, signal.SIGKILL)  # not reaped yet: the run is a zombie while the job checks
    # the watchdog polls every 0.5 s; the limits are generous so that a busy machine cannot fail
    # the test (a job that never ends itself still fails it)
    assert _wait_for(lambda: _gone(job), timeout=30.0), "the job outlived its run"
    assert _wait_for(lambda: _gone(helper), timeout=30.0), "the job's own process outlived it"
    run.wait()
    text = log.read_text()
    assert f"the Snakemake process that started this job (PID {run.pid} on" in text
    assert f"ending this job (PID {job})" in text
    assert "rerun the same command to resume" in text


def test_a_job_marked_by_a_run_on_another_host_goes_on(fake_run):
    run, job, helper, log = fake_run(host="login-node-1")
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    time.sleep(0.5)  # five of the job's checks
    assert not _gone(job) and not _gone(helper)
    assert log.read_text() == ""


def _this_process_with(**changes):
    """JTC_RUN naming this process (pytest's), with fields replaced."""
    run = watchdog.this_run()
    assert run is not None
    fields = {**run.__dict__, **changes}
    return {watchdog.ENV: str(watchdog.Run(**fields))}


def test_a_job_whose_run_is_already_gone_ends_at_once(tmp_path):
    # pytest's PID with another start time: the PID of a run that ended, now reused
    environ = {**os.environ, **_this_process_with(start=watchdog.this_run().start + 1)}
    code = (
        "from jtc.pipeline.watchdog import end_with_parent_run; end_with_parent_run(); "
        "print('ran on')"
    )
    done = waits.run([sys.executable, "-c", code], 60, env=environ, text=True)
    assert done.returncode == watchdog.EXIT_CODE
    assert "ran on" not in done.stdout
    assert f"jtc: the Snakemake process that started this job (PID {os.getpid()}" in done.stderr


def test_nothing_is_watched_without_a_mark_this_process_can_check(monkeypatch):
    here = watchdog.this_run()
    assert here is not None
    parent = _this_process_with(pid=os.getppid(), start=watchdog._stat(os.getppid())[2])
    assert watchdog.watched_run(parent) == watchdog.Run.parse(parent[watchdog.ENV])
    for environ in (
        {},
        {watchdog.ENV: ""},
        {watchdog.ENV: "pid=12 start=x"},
        _this_process_with(host=here.host + "-node7"),  # a cluster node's job, a login's PID
        _this_process_with(pidns="pid:[1]"),  # a container with PIDs of its own
        _this_process_with(),  # the run itself
    ):
        assert watchdog.watched_run(environ) is None, environ
        assert watchdog.end_with_parent_run(environ) is None
    monkeypatch.setattr(watchdog.sys, "platform", "darwin")
    assert watchdog.watched_run(parent) is None
    assert watchdog.end_with_parent_run(parent) is None


def test_mark_run_names_this_process_or_removes_an_inherited_mark(monkeypatch):
    environ = {}
    run = watchdog.mark_run(environ)
    assert run == watchdog.this_run() and run.pid == os.getpid()
    assert watchdog.Run.parse(environ[watchdog.ENV]) == run
    assert watchdog.alive(run)
    monkeypatch.setattr(watchdog.sys, "platform", "win32")
    assert watchdog.mark_run(environ) is None and watchdog.ENV not in environ


# --- a folder locked while processes still work in it ---

# a job as Snakemake 9 runs one: a copy of its script in .snakemake/scripts, its log open
SCRIPT = """
import sys, time
from pathlib import Path
log = Path(sys.argv[1]); log.parent.mkdir(parents=True, exist_ok=True)
handle = open(log, "a"); Path(str(log) + ".open").touch()
time.sleep(60)
"""
SLEEP = "import time; time.sleep(60)"
# a Snakemake run (an argument named snakemake) that starts the command in its arguments
RUN_JOB = "import subprocess, sys, time; subprocess.Popen(sys.argv[2:]); time.sleep(60)"


@pytest.fixture
def workdir(tmp_path):
    """A workflow folder whose lock is held; the processes started in it are killed after."""
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.output.lock").write_text("results/x\n")
    started = []

    def start(*argv):
        proc = subprocess.Popen(argv, cwd=tmp_path)
        started.append(proc)
        return proc

    yield tmp_path, start
    for worker in locks.workers_in(tmp_path):
        _kill(worker.pid)
    for proc in started:
        proc.kill()
        proc.wait()


def test_jobs_left_by_a_killed_run_are_named_with_the_command_that_stops_them(workdir):
    folder, start = workdir
    script = folder / ".snakemake" / "scripts" / "tmpx1_y2z3.r2_table.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    log = folder / "logs" / "r2_table" / "gpt" / "news.log"
    fit = start(sys.executable, "-c", SLEEP, str(folder / "workflow/scripts/fit_map.py"))
    table = start(sys.executable, str(script), str(log))
    start(sys.executable, "-c", SLEEP, "unrelated.py")  # works here, but no job: not named
    assert _wait_for(Path(f"{log}.open").exists)

    message = locks.held_lock_message(folder)
    assert message is not None, "no message"
    assert str(folder / ".snakemake" / "locks") in message
    assert "jobs of an earlier run that is gone (killed?), still running:" in message
    assert f"PID {fit.pid}: job fit_map\n" in message
    assert f"PID {table.pid}: job r2_table (log logs/r2_table/gpt/news.log)" in message
    assert f"  kill {' '.join(map(str, sorted([fit.pid, table.pid])))}\n" in message
    assert "--unlock while they run" in message
    assert locks.clear_stale_locks(folder) == []  # kept while they work
    assert (folder / ".snakemake" / "locks" / "0.output.lock").exists()

    for proc in (fit, table):
        proc.kill()
        proc.wait()
    assert locks.held_lock_message(folder) is None
    assert [p.name for p in locks.clear_stale_locks(folder)] == ["0.output.lock"]
    assert locks.held_lock_message(folder) is None  # nothing locked


def test_a_live_run_is_named_with_its_jobs_and_its_jobs_become_orphans_when_it_is_killed(
    workdir,
):
    folder, start = workdir
    job_argv = [sys.executable, "-c", SLEEP, "/repo/workflow/scripts/fit_map.py"]
    run = start(sys.executable, "-c", RUN_JOB, "/venv/bin/snakemake", *job_argv)
    assert _wait_for(lambda: _job_of(run.pid) is not None)
    job = _job_of(run.pid)
    assert _wait_for(lambda: len(locks.workers_in(folder)) == 2)

    workers = {w.pid: w for w in locks.workers_in(folder)}
    assert (workers[run.pid].kind, workers[run.pid].parent) == ("run", None)
    assert (workers[job].kind, workers[job].name, workers[job].parent) == (
        "job",
        "fit_map",
        run.pid,
    )
    message = locks.held_lock_message(folder)
    assert f"  PID {run.pid}: a Snakemake run: {sys.executable} -c " in message
    assert f"\n    PID {job}: job fit_map\n" in message
    assert "earlier run that is gone" not in message
    assert f"  kill {' '.join(map(str, sorted([run.pid, job])))}\n" in message

    run.kill()
    run.wait()
    message = locks.held_lock_message(folder)
    assert "a Snakemake run" not in message
    assert f"still running:\n    PID {job}: job fit_map\nSnakemake refuses" in message
    assert f"  kill {job}\n" in message
    _kill(job)


def test_nothing_is_said_when_nothing_is_locked_or_nothing_works_there(tmp_path):
    assert locks.held_lock_message(tmp_path) is None  # no lock
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("")
    assert locks.held_lock_message(tmp_path) is None  # a lock, nothing working: cleared instead


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "/w/.snakemake/scripts/tmpab_12cd.fit_map.py"], ("job", "fit_map")),
        (["python", "workflow/scripts/r2_table.py"], ("job", "r2_table")),
        (["/v/bin/python", "/v/bin/snakemake", "--cores", "2", "all"], ("run", "snakemake")),
        (["python", "-m", "snakemake", "--cores", "2"], ("run", "snakemake")),
        (
            [
                "python",
                "-m",
                "snakemake",
                "--target-jobs",
                "fit_map:model=gpt",
                "--mode",
                "subprocess",
            ],
            ("job", "fit_map"),
        ),
        (["/bin/sh", "-c", "cd /w && python -m snakemake --mode 'subprocess'"], None),
        (["tail", "-f", ".snakemake/log/x.snakemake.log"], None),
        (["python", "-c", "print('/w/workflow/scripts/fit_map.py')"], None),
        ([], None),
    ],
)
def test_classify(argv, expected):
    assert locks._classify(argv) == expected
