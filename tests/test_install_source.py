"""The requirement `ftmatrix init` writes into the nightly: how this ftmatrix was installed.

ftmatrix is not on PyPI, so the nightly's runners must install it the way it reached this
machine (PEP 610's direct_url.json, which pip and uv write): `ftmatrix==VERSION` only
where it came from an index. The nightly run under act with such a requirement is
tests/test_package.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftmatrix import __version__
from ftmatrix.cli import main
from ftmatrix.errors import ExitCode
from ftmatrix.init import NIGHTLY
from ftmatrix.install_source import InstallSource, install_source, this_install_source

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("direct_url", "requirement"),
    [
        # From an index (no direct_url.json): the release.
        (None, "ftmatrix==0.1.0"),
        # pip install "ftmatrix @ git+https://github.com/o/ftmatrix@main": that commit.
        (
            {
                "url": "https://github.com/o/ftmatrix",
                "vcs_info": {"vcs": "git", "requested_revision": "main", "commit_id": COMMIT},
            },
            f"ftmatrix @ git+https://github.com/o/ftmatrix@{COMMIT}",
        ),
        # A token in the URL never reaches the committed nightly; ssh's git@ is kept.
        (
            {"url": "https://x-token:s3cr3t@host/o/ftmatrix", "vcs_info": {"vcs": "git", "commit_id": COMMIT}},
            f"ftmatrix @ git+https://host/o/ftmatrix@{COMMIT}",
        ),
        (
            {"url": "ssh://git@host/o/ftmatrix", "vcs_info": {"vcs": "git", "commit_id": COMMIT}},
            f"ftmatrix @ git+ssh://git@host/o/ftmatrix@{COMMIT}",
        ),
        (
            {"url": "https://host/o/mono", "vcs_info": {"vcs": "git", "commit_id": COMMIT}, "subdirectory": "tools/ftmatrix"},
            f"ftmatrix @ git+https://host/o/mono@{COMMIT}#subdirectory=tools/ftmatrix",
        ),
        # A wheel published somewhere: that URL.
        (
            {"url": "https://host/dist/ftmatrix-0.1.0-py3-none-any.whl", "archive_info": {}},
            "ftmatrix @ https://host/dist/ftmatrix-0.1.0-py3-none-any.whl",
        ),
    ],
)  # fmt: skip
def test_the_requirement_follows_how_ftmatrix_was_installed(direct_url, requirement):
    assert install_source(direct_url, "0.1.0") == InstallSource(requirement=requirement)


@pytest.mark.parametrize(
    ("direct_url", "what"),
    [
        ({"url": "file:///srv/ftmatrix-0.1.0-py3-none-any.whl", "archive_info": {}}, "file"),
        ({"url": "file:///home/me/ftmatrix", "dir_info": {"editable": True}}, "folder"),
    ],
)
def test_a_local_file_or_folder_is_written_with_a_note_for_hosted_runners(direct_url, what):
    source = install_source(direct_url, "0.1.0")
    assert source.requirement == f"ftmatrix @ {direct_url['url']}"
    assert source.note is not None
    assert source.note.startswith(f"ftmatrix was installed from a {what} on this machine")


def test_init_writes_the_requirement_of_this_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """This checkout's ftmatrix is an editable install (a folder): the nightly gets that
    folder, never ftmatrix==VERSION, which no index holds."""
    source = this_install_source()
    assert source.requirement != f"ftmatrix=={__version__}"
    assert main(["init", "six", "--dir", str(tmp_path)]) == ExitCode.OK
    nightly = yaml.safe_load((tmp_path / NIGHTLY).read_text())
    assert nightly["jobs"]["matrix"]["with"]["ftmatrix"] == source.requirement
    out = capsys.readouterr().out
    assert f"the nightly installs ftmatrix as {source.requirement!r}" in out
    assert f"note: {source.note}" in out
