# Where the workflow's own files come from (the Snakefile's WORKFLOW_SOURCE: a folder on disk, or
# a module's remote source read through Snakemake's source cache), and how to install the jtc of
# that source where no checkout's src/ is beside it. Functions only, included by the Snakefile
# before it imports jtc.
import os

from snakemake.sourcecache import LocalSourceFile


def workflow_file(relative):
    """A local path to the file `relative` (to workflow/) of this workflow's own tree: the file
    itself on disk, else Snakemake's cached copy of the remote file."""
    source = WORKFLOW_SOURCE.join(relative)
    if isinstance(source, LocalSourceFile):
        return source.get_path_or_uri(secret_free=False)
    return workflow.sourcecache.get_path(source)


def install_command():
    """The pip command installing the jtc of this workflow's own source (a git-hosted module:
    its repository at its tag), or a template of it."""
    source, url = WORKFLOW_SOURCE, "https://github.com/OWNER/jtc"
    if getattr(source, "repo", None) and getattr(source, "host", None):
        url = f"https://{source.host}/{source.repo}"
    elif getattr(source, "repo_path", None):
        url = f"file://{os.path.abspath(source.repo_path)}"
    ref = getattr(source, "ref", None) or "TAG"  # its tag, commit or branch
    return f'pip install "jtc @ git+{url}@{ref}"'
