"""jtc deployed as a Snakemake module the way `snakedeploy deploy-workflow` does it: a folder of
its own with config/config.yaml and a workflow/Snakefile that declares jtc as a module (by its
path, or by `github(...)`, read from a git cache seeded here so that nothing is downloaded), and
the Snakemake command run in that folder as its user would run it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import waits
import yaml
from harness import ROOT, TIMEOUT, snakemake_env

# snakedeploy 0.17's templates/use_module.smk.jinja rendered for jtc (less a trailing space),
# the module's source declaration filled in by deploy
DEPLOYED_SNAKEFILE = """from snakemake.utils import min_version


min_version("6.10.0")


configfile: "config/config.yaml"


# declare https://github.com/{repo} as a module
module jtc:
    snakefile:
        {snakefile}
    config:
        config


# use all rules from https://github.com/{repo}
use rule * from jtc
"""
HOSTED = "jtc-test/jtc"  # the owner/name that github(...) declarations name
TAG = "v0"


def deploy(folder, snakefile: str, config: dict, profile: bool = True) -> Path:
    """A deployment folder: workflow/Snakefile declaring jtc as a module whose source is
    `snakefile` (Snakefile syntax: a quoted path, or `github(...)`), config/config.yaml holding
    `config`, and with `profile` jtc's workflow profile copied to workflow/profiles/default
    (docs/deploying.md)."""
    folder = Path(folder)
    (folder / "config").mkdir(parents=True, exist_ok=True)
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "workflow").mkdir(exist_ok=True)
    text = DEPLOYED_SNAKEFILE.format(repo=HOSTED, snakefile=snakefile)
    (folder / "workflow" / "Snakefile").write_text(text)
    if profile:
        shutil.copytree(ROOT / "workflow/profiles/default", folder / "workflow/profiles/default")
    return folder


def github_declaration(repo: str = HOSTED, tag: str = TAG) -> str:
    """What snakedeploy writes for `snakedeploy deploy-workflow https://github.com/REPO DEST
    --tag TAG`."""
    return f'github("{repo}", path="workflow/Snakefile", tag="{tag}")'


def seed_github_cache(cache_home, repo: str = HOSTED, tag: str = TAG) -> Path:
    """Put a bare clone of a repository holding this checkout's workflow/ (as it is now, tagged
    `tag`) where Snakemake's source cache keeps its clone of github.com/REPO, under
    XDG_CACHE_HOME=`cache_home`: Snakemake then reads github(REPO, ..., tag=TAG) files from it
    without downloading anything, and no file of the workflow is on disk outside git."""
    cache_home = Path(cache_home)
    work = cache_home.parent / "hosted-work-tree"
    shutil.copytree(
        ROOT / "workflow", work / "workflow", ignore=shutil.ignore_patterns("__pycache__")
    )
    git = ["git", "-c", "user.name=jtc tests", "-c", "user.email=tests@jtc.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "jtc"], ["tag", tag]):
        subprocess.run([*git, *args], cwd=work, check=True, capture_output=True)
    clones = cache_home / "snakemake/snakemake/source-cache/snakemake-git-cache/github.com"
    bare = clones / repo
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    shutil.rmtree(work)
    return bare


def installed_copy(site) -> Path:
    """A copy of jtc's package (src/jtc) in the folder `site`, standing for jtc installed into
    site-packages (pip install), beside another package: put `site` on PYTHONPATH."""
    site = Path(site)
    shutil.copytree(ROOT / "src/jtc", site / "jtc", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "neighbour.py").write_text("# another installed module\n")
    return site


def run_deployed(folder, *args, env=None, check=True) -> subprocess.CompletedProcess:
    """`snakemake --cores 2 ARGS` run in the deployment folder, as its user runs it (neither -s
    nor -d nor --configfile). With check, a failed run raises an AssertionError showing the tail
    of its output."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *map(str, args)]
    what = f"snakemake to finish in {folder}: {' '.join(cmd)}"
    proc = waits.run(cmd, TIMEOUT, what, cwd=folder, text=True, env=snakemake_env(env))
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed (exit {proc.returncode}) in {folder}: {' '.join(cmd)}\n"
            f"--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
            f"--- stderr (tail) ---\n{proc.stderr[-6000:]}"
        )
    return proc
